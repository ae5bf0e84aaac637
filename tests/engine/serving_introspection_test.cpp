// ServingEngine's KvIntrospector on stories260K: snapshots agree with the metrics of the same
// moment, a running request's block table is dumped, and explain matches what admission then
// finds (hit tokens equal the request's cached_tokens), on the caller's thread and on the loop's.
#include <gtest/gtest.h>

#include "engine/introspection.h"
#include "serving_test_util.h"

namespace pagoda::testing {
namespace {

using engine::ExplainCause;

engine::CompletionRequest request_of(std::vector<int32_t> prompt, int64_t max_tokens, const std::string& salt = "") {
  engine::CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.cache_salt = salt;
  return r;
}

TEST(ServingIntrospection, SnapshotRequestDumpAndExplainAgreeWithAdmission) {
  auto stories = load_stories();
  auto se = serving(*stories, {}, {});
  engine::KvIntrospector* kv = se->introspector();
  ASSERT_NE(kv, nullptr);
  const std::vector<int32_t> prompt = stories->tokenizer->encode(kStoryText, true, false);
  const int64_t B = se->engine().kv_layout().block_size;
  ASSERT_GT(static_cast<int64_t>(prompt.size()), 3 * B);

  engine::ExplainRequest ask;
  ask.prompt = prompt;
  EXPECT_EQ(kv->explain(ask)->cause, ExplainCause::kNeverSeen);
  EXPECT_EQ(kv->explain(ask)->hit_tokens, 0);

  auto first = std::make_shared<Recorder>();
  const engine::RequestId id = *se->submit(request_of(prompt, 8), first);
  EXPECT_EQ(kv->request_kv(id)->request.state, "waiting");  // still in the inbox
  ASSERT_TRUE(se->step());
  auto dumped = kv->request_kv(id);
  ASSERT_TRUE(dumped.is_ok()) << dumped.status().message();
  EXPECT_EQ(dumped->request.state, "decoding");  // the whole prompt fits one step
  ASSERT_EQ(dumped->sequences.size(), 1u);
  const engine::SequenceKv& seq = dumped->sequences[0];
  EXPECT_TRUE(seq.running);
  EXPECT_EQ(seq.length, static_cast<int64_t>(prompt.size()));
  ASSERT_EQ(static_cast<int64_t>(seq.blocks.size()), (seq.length + B - 1) / B);
  for (const engine::BlockSnapshot& b : seq.blocks) {
    EXPECT_EQ(b.state, "in use");
    EXPECT_EQ(b.ref_count, 1);
    EXPECT_EQ(b.tier, "pool");
    EXPECT_EQ(b.hash != 0, (b.index + 1) * B <= seq.length) << "full blocks are registered, the partial one is not";
  }
  engine::KvSnapshot mid = kv->snapshot({});
  ASSERT_EQ(mid.requests.size(), 1u);
  EXPECT_EQ(mid.requests[0].blocks_held, static_cast<int64_t>(seq.blocks.size()));
  EXPECT_EQ(mid.blocks_in_use, static_cast<int64_t>(seq.blocks.size()));
  EXPECT_EQ(mid.metrics.running, 1);
  run_to_end(*se);
  EXPECT_FALSE(kv->request_kv(id).is_ok());  // finished requests are forgotten

  // Explain the same prompt now: every full block before the last token would hit, and a
  // request of it is then served with exactly that many cached tokens.
  const engine::KvExplanation again = *kv->explain(ask);
  EXPECT_EQ(again.cause, ExplainCause::kFullHit);
  EXPECT_EQ(again.hit_tokens, (static_cast<int64_t>(prompt.size()) - 1) / B * B);
  auto second = std::make_shared<Recorder>();
  ASSERT_TRUE(se->submit(request_of(prompt, 4), second).is_ok());
  run_to_end(*se);
  EXPECT_EQ(second->usage().cached_tokens, again.hit_tokens);
  // Another tenant's salt: nothing hits, and the cause says why.
  ask.cache_salt = "tenant-b";
  const engine::KvExplanation other = *kv->explain(ask);
  EXPECT_EQ(other.cause, ExplainCause::kSaltDiffers);
  EXPECT_EQ(other.other_ns_hit_tokens, again.hit_tokens);

  const engine::KvSnapshot end = kv->snapshot({});
  const engine::ServingMetrics m = se->metrics();
  EXPECT_EQ(end.metrics.prefix_hit_tokens, m.prefix_hit_tokens);
  EXPECT_EQ(end.metrics.prefix_hit_tokens, again.hit_tokens);
  EXPECT_EQ(end.blocks_cached, m.kv_blocks_cached);
  EXPECT_EQ(end.blocks_free, m.kv_blocks_free);
  EXPECT_EQ(static_cast<int64_t>(end.block_map.size()), end.num_blocks);
  ASSERT_FALSE(end.top_prefixes.empty());
  // The first request's KV: its prompt and the 7 generated tokens fed back (the 8th never is).
  EXPECT_EQ(end.top_prefixes[0].num_tokens, (static_cast<int64_t>(prompt.size()) + 7) / B * B);
  EXPECT_EQ(end.top_prefixes[0].preview.rfind("Once upon a time", 0), 0u) << end.top_prefixes[0].preview;
  EXPECT_GE(end.top_prefixes[0].last_use_age_s, 0);
  EXPECT_TRUE(end.requests.empty());
  EXPECT_FALSE(kv->explain(engine::ExplainRequest{}).is_ok());  // an empty prompt is an error
  expect_clean(*se);
}

TEST(ServingIntrospection, CallsFromOtherThreadsRunBetweenSteps) {
  auto stories = load_stories();
  auto se = serving(*stories, {}, {});
  se->start();
  std::vector<std::shared_ptr<Recorder>> recorders;
  for (int i = 0; i < 6; ++i) {
    recorders.push_back(std::make_shared<Recorder>());
    ASSERT_TRUE(se->submit(request_of(mixed_prompt(*stories->tokenizer, i), 24), recorders.back()).is_ok());
  }
  int64_t seen_running = 0;
  for (int i = 0; i < 50; ++i) {
    const engine::KvSnapshot s = se->introspector()->snapshot({});
    EXPECT_EQ(s.blocks_free + s.blocks_in_use + s.blocks_cached, s.num_blocks);
    int64_t held = 0;
    for (const engine::RequestSnapshot& r : s.requests) held += r.state == "decoding" || r.state == "prefilling";
    EXPECT_EQ(held, s.metrics.running) << "requests and gauges come from one moment";
    seen_running = std::max(seen_running, held);
  }
  for (auto& r : recorders) r->wait();
  se->shutdown(true);
  // After the loop has ended the calls still answer (on the caller's thread).
  EXPECT_TRUE(se->introspector()->snapshot({}).requests.empty());
  expect_clean(*se);
}

}  // namespace
}  // namespace pagoda::testing
