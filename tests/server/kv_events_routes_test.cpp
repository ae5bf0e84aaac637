// GET /v1/kv/events and /v1/kv/events/snapshot of a real server with KV events on: how it names
// blocks (a router recomputes the same hashes from the prompt), what its events said about a
// served prompt (read back through the replay socket), and the snapshot a resync loads.
#include <gtest/gtest.h>
#include <zmq.h>

#include "events/event_codec.h"
#include "events/zmq_socket.h"
#include "kvcache/block_hash.h"
#include "model/text/prompt_tokens.h"
#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

std::string hex64(uint64_t v) { return events::hash_to_hex(v); }

class KvEventsRoutesTest : public RealServerTest {
 protected:
  void SetUp() override {
    kv_events_ = true;
    RealServerTest::SetUp();
  }
  json get(const std::string& path) {
    auto r = client_->Get(path.c_str());
    EXPECT_TRUE(r && r->status == 200) << path;
    return r ? json::parse(r->body, nullptr, false) : json();
  }
};

TEST_F(KvEventsRoutesTest, InfoSaysHowBlocksAreNamedAndWhereEventsGo) {
  const json info = get("/v1/kv/events");
  const engine::Engine& eng = serving_->engine();
  EXPECT_EQ(info["instance_id"], "test-instance");
  EXPECT_EQ(info["block_hash"], "pagoda-xxh64-chain-v1");
  EXPECT_EQ(info["block_size"], eng.kv_layout().block_size);
  EXPECT_EQ(info["model_fingerprint"], hex64(eng.model_fingerprint()));
  EXPECT_EQ(info["kv_format"], hex64(eng.kv_format_key()));
  EXPECT_EQ(info["prefix_caching"], true);
  EXPECT_EQ(info["tokenizer_probe"].get<std::vector<int32_t>>(), model::encode_prompt(*tokenizer_, model::kTokenizerProbe));
  EXPECT_EQ(info["kv_events"]["enabled"], true);
  EXPECT_EQ(info["kv_events"]["endpoint"], publisher_->endpoint());
  EXPECT_EQ(info["kv_events"]["replay_endpoint"], publisher_->replay_endpoint());
  EXPECT_EQ(info["kv_events"]["encoding"], "map");
}

TEST_F(KvEventsRoutesTest, AServedPromptsBlocksAreInItsEventsAndSnapshot) {
  const std::string prompt =
      "Once upon a time there was a little girl named Lily. She liked to play with her ball. One day she went "
      "to the park with her mom and saw a big red dog.";
  auto r = post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}});
  ASSERT_TRUE(r && r->status == 200);
  // The chain a router computes from the prompt alone.
  const json info = get("/v1/kv/events");
  const int64_t block_size = info["block_size"];
  kvcache::KvNamespace ns;
  ns.model_fingerprint = serving_->engine().model_fingerprint();
  ns.kv_format = serving_->engine().kv_format_key();
  const std::vector<int32_t> tokens = model::encode_prompt(*tokenizer_, prompt);
  std::vector<uint64_t> chain;
  kvcache::BlockHash parent = kvcache::kRootBlockHash;
  for (int64_t b = 0; (b + 1) * block_size <= static_cast<int64_t>(tokens.size()); ++b) {
    parent = kvcache::hash_block(parent, std::span<const int32_t>(tokens).subspan(b * block_size, block_size), ns.key());
    chain.push_back(parent);
  }
  ASSERT_GE(chain.size(), 2u);
  const json snapshot = get("/v1/kv/events/snapshot");
  ASSERT_TRUE(snapshot["media"].contains("GPU")) << snapshot.dump();
  const std::vector<std::string> gpu = snapshot["media"]["GPU"];
  for (uint64_t h : chain) EXPECT_NE(std::find(gpu.begin(), gpu.end(), hex64(h)), gpu.end()) << hex64(h);
  EXPECT_GE(snapshot["seq"].get<int64_t>(), 1);

  // The events themselves, replayed from the start.
  events::ZmqContext ctx;
  events::ZmqSocket dealer(ctx, ZMQ_DEALER);
  ASSERT_TRUE(dealer.connect(publisher_->replay_endpoint()).is_ok());
  ASSERT_TRUE(dealer.send({"", events::encode_seq(0)}));
  std::vector<events::KvEvent> seen;
  std::vector<std::string> frames;
  zmq_pollitem_t item = {dealer.get(), 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&item, 1, 10000) > 0 && dealer.receive(frames, false)) {
    int64_t seq = 0;
    ASSERT_EQ(frames.size(), 3u);
    ASSERT_TRUE(events::decode_seq(frames[1], seq));
    if (seq < 0) break;
    auto batch = events::decode_batch(frames[2]);
    ASSERT_TRUE(batch.is_ok()) << batch.status().message();
    EXPECT_EQ(batch->ts, 1700000000.0);
    for (auto& e : batch->events) seen.push_back(e);
  }
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].type, events::KvEventType::kAllBlocksCleared);
  std::vector<uint64_t> stored;
  for (const events::KvEvent& e : seen) {
    if (e.type != events::KvEventType::kBlockStored) continue;
    EXPECT_EQ(e.medium, "GPU");
    EXPECT_EQ(e.block_size, block_size);
    EXPECT_EQ(e.token_ids.size(), e.block_hashes.size() * static_cast<size_t>(block_size));
    if (stored.empty()) {
      EXPECT_FALSE(e.parent_block_hash.has_value());  // the prompt's first block is a root
      EXPECT_EQ(std::vector<int32_t>(e.token_ids.begin(), e.token_ids.begin() + block_size),
                std::vector<int32_t>(tokens.begin(), tokens.begin() + block_size));
    }
    stored.insert(stored.end(), e.block_hashes.begin(), e.block_hashes.end());
  }
  ASSERT_GE(stored.size(), chain.size());
  EXPECT_EQ(std::vector<uint64_t>(stored.begin(), stored.begin() + chain.size()), chain);
  expect_idle_and_intact();
}

TEST_F(RealServerTest, KvEventsAreOffUnlessConfigured) {
  auto info = client_->Get("/v1/kv/events");
  ASSERT_TRUE(info && info->status == 200);
  EXPECT_EQ(json::parse(info->body)["kv_events"]["enabled"], false);
  auto snapshot = client_->Get("/v1/kv/events/snapshot");
  ASSERT_TRUE(snapshot);
  EXPECT_EQ(snapshot->status, 404);
  EXPECT_NE(snapshot->body.find("--kv-events-config"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::testing
