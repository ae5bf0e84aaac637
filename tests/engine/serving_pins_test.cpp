// Pinning prompt prefixes through the ServingEngine (engine/pinning.h) on stories260K, driven by
// step() with a ManualClock: pins survive floods of other prompts, expire by the clock, are
// bounded, and generation over a pinned prefix equals generation without one.
#include <gtest/gtest.h>

#include "engine/pinning.h"
#include "serving_test_util.h"

namespace pagoda::testing {
namespace {

class PinRecorder final : public engine::PinObserver {
 public:
  void on_pinned(const Status& status, const engine::PinInfo& pin) override {
    EXPECT_FALSE(called) << "on_pinned twice";
    called = true;
    this->status = status;
    info = pin;
  }
  bool called = false;
  Status status;
  engine::PinInfo info;
};

constexpr int64_t kSecond = 1'000'000'000;

struct PinFixture {
  explicit PinFixture(int64_t blocks, double share = 0.5) : s(load_stories()) {
    engine::EngineConfig ec;
    ec.kv_cache_bytes = pool_bytes(*s, blocks);
    engine::ServingConfig sc;
    sc.max_num_seqs = 4;
    sc.max_num_batched_tokens = 64;
    sc.max_pinned_share = share;
    se = serving(*s, ec, sc);
    block_size = se->engine().kv_layout().block_size;
  }
  // pin() and step until it answers.
  std::shared_ptr<PinRecorder> pin(std::vector<int32_t> prompt, double ttl_s = 0, const std::string& salt = "") {
    engine::PinRequest r;
    r.prompt = std::move(prompt);
    r.ttl_s = ttl_s;
    r.cache_salt = salt;
    auto rec = std::make_shared<PinRecorder>();
    const Status queued = se->pinner()->pin(std::move(r), rec);
    EXPECT_TRUE(queued.is_ok()) << queued.message();
    if (!queued.is_ok()) return nullptr;
    run_to_end(*se);
    EXPECT_TRUE(rec->called);
    return rec;
  }
  std::shared_ptr<Recorder> complete(std::vector<int32_t> prompt, int64_t max_tokens = 8, const std::string& salt = "") {
    engine::CompletionRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.cache_salt = salt;
    auto rec = std::make_shared<Recorder>();
    EXPECT_TRUE(se->submit(std::move(r), rec).is_ok());
    return rec;
  }
  // Distinct prompts that together need several times the pool.
  void flood(int n, int64_t tokens_each) {
    std::vector<std::shared_ptr<Recorder>> recs;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(tokens_each));
      for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<int32_t>(1 + (i * 131 + j * 7) % 500);
      recs.push_back(complete(std::move(p), 4));
    }
    run_to_end(*se);
    for (const auto& r : recs) EXPECT_TRUE(r->status().is_ok()) << r->status().message();
  }
  std::vector<int32_t> system_prompt(int64_t min_tokens) const {
    std::string text = kStoryText;
    while (static_cast<int64_t>(s->tokenizer->encode(text, true, false).size()) < min_tokens) text += " " + text;
    std::vector<int32_t> t = s->tokenizer->encode(text, true, false);
    t.resize(static_cast<size_t>(min_tokens));
    return t;
  }

  std::unique_ptr<Stories> s;
  std::unique_ptr<engine::ServingEngine> se;
  int64_t block_size = 0;
};

std::vector<int32_t> with_question(std::vector<int32_t> prefix, const model::Tokenizer& tok) {
  for (int32_t t : tok.encode(" What did Lily see?", false, false)) prefix.push_back(t);
  return prefix;
}

TEST(ServingPins, PinnedPrefixStillHitsAfterAFloodAndEqualsTheReference) {
  PinFixture f(64);
  const std::vector<int32_t> system = f.system_prompt(5 * f.block_size + 3);  // 5 full blocks
  auto pinned = f.pin(system);
  ASSERT_TRUE(pinned->status.is_ok()) << pinned->status.message();
  EXPECT_EQ(pinned->info.prompt_tokens, 5 * f.block_size + 3);
  EXPECT_EQ(pinned->info.pinned_tokens, 5 * f.block_size);
  EXPECT_EQ(pinned->info.blocks.size(), 5u);
  EXPECT_EQ(pinned->info.expires_in_s, -1);
  EXPECT_EQ(f.se->metrics().kv_blocks_pinned, 5);
  EXPECT_EQ(f.se->metrics().pins, 1);
  EXPECT_EQ(f.se->metrics().ttft.count, 0) << "a pin generates nothing";
  f.flood(12, 8 * f.block_size);  // 12 x 8 blocks through a 64-block pool
  EXPECT_GT(f.se->metrics().evicted_blocks, 32);
  const std::vector<int32_t> asked = with_question(system, *f.s->tokenizer);
  auto hit = f.complete(asked, 12);
  run_to_end(*f.se);
  ASSERT_TRUE(hit->status().is_ok());
  EXPECT_EQ(hit->usage().cached_tokens, 5 * f.block_size);
  // The same tokens as generating without any cache.
  engine::GenerateRequest g;
  g.prompt = asked;
  g.max_new_tokens = 12;
  auto ref = f.s->reference->generate(g);
  ASSERT_TRUE(ref.is_ok());
  EXPECT_EQ(hit->choice(0).tokens, ref->tokens);
  expect_clean(*f.se);

  // Unpinned, the next flood evicts it.
  auto removed = f.se->pinner()->unpin(pinned->info.id);
  ASSERT_TRUE(removed.is_ok());
  EXPECT_EQ(removed->blocks, pinned->info.blocks);
  EXPECT_EQ(f.se->pinner()->unpin(pinned->info.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.se->metrics().kv_blocks_pinned, 0);
  f.flood(12, 8 * f.block_size);
  auto miss = f.complete(asked, 2);
  run_to_end(*f.se);
  EXPECT_EQ(miss->usage().cached_tokens, 0);
  expect_clean(*f.se);
}

TEST(ServingPins, TtlExpiresByTheInjectedClockAndRepinningRefreshesIt) {
  PinFixture f(64);
  const std::vector<int32_t> a = f.system_prompt(2 * f.block_size + 1);
  std::vector<int32_t> b = a;
  b[1] = b[1] == 5 ? 6 : 5;  // another prompt from its second token on
  auto pa = f.pin(a, 10);
  auto pb = f.pin(b, 30);
  ASSERT_TRUE(pa->status.is_ok() && pb->status.is_ok());
  EXPECT_DOUBLE_EQ(pa->info.expires_in_s, 10);
  f.s->clock.advance_ns(5 * kSecond);
  auto again = f.pin(a, 10);  // refreshed: expires at 15 s now
  ASSERT_TRUE(again->status.is_ok());
  EXPECT_TRUE(again->info.refreshed);
  EXPECT_EQ(again->info.id, pa->info.id);
  EXPECT_EQ(f.se->pinner()->pins().size(), 2u);
  f.s->clock.advance_ns(10 * kSecond);  // 15 s
  std::vector<engine::PinInfo> left = f.se->pinner()->pins();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].id, pb->info.id);
  EXPECT_DOUBLE_EQ(left[0].expires_in_s, 15);
  EXPECT_EQ(f.se->metrics().pins_expired, 1);
  f.s->clock.advance_ns(15 * kSecond);  // 30 s: expires when the next step runs
  auto r = f.complete(f.system_prompt(3), 1);
  run_to_end(*f.se);
  EXPECT_EQ(f.se->metrics().pins, 0);
  EXPECT_EQ(f.se->metrics().pins_expired, 2);
  expect_clean(*f.se);
}

TEST(ServingPins, BoundSaltsAndBadPinsAreRefusedClearly) {
  PinFixture f(24, 0.5);  // pins may hold 12 blocks
  const engine::PinStats stats = f.se->pinner()->pin_stats();
  EXPECT_EQ(stats.max_pinned_blocks, 12);
  auto first = f.pin(f.system_prompt(8 * f.block_size));
  ASSERT_TRUE(first->status.is_ok()) << first->status.message();
  // 8 more distinct blocks would make 16 > 12: refused after computing, nothing pinned.
  std::vector<int32_t> other = f.system_prompt(8 * f.block_size);
  other[1] = other[1] == 5 ? 6 : 5;
  auto over = f.pin(other);
  EXPECT_EQ(over->status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over->status.message().find("--max-pinned-share"), std::string::npos) << over->status.message();
  EXPECT_EQ(f.se->metrics().kv_blocks_pinned, 8);
  // The same prompt under another salt is another pin (and its own blocks): refused too.
  auto salted = f.pin(f.system_prompt(8 * f.block_size), 0, "tenant-b");
  EXPECT_EQ(salted->status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(f.se->pinner()->unpin(f.system_prompt(8 * f.block_size), "tenant-b").status().code(), StatusCode::kNotFound);
  // Refused before anything is computed.
  engine::CachePinner& pinner = *f.se->pinner();
  auto rec = std::make_shared<PinRecorder>();
  auto try_pin = [&](std::vector<int32_t> prompt, double ttl = 0) {
    engine::PinRequest r;
    r.prompt = std::move(prompt);
    r.ttl_s = ttl;
    return pinner.pin(std::move(r), rec);
  };
  EXPECT_EQ(try_pin(f.system_prompt(13 * f.block_size)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(try_pin(f.system_prompt(f.block_size - 1)).code(), StatusCode::kInvalidArgument);  // no full block
  EXPECT_EQ(try_pin({}).code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> out_of_vocab = f.system_prompt(2 * f.block_size);
  out_of_vocab[3] = 99999;
  EXPECT_EQ(try_pin(out_of_vocab).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(try_pin(f.system_prompt(2 * f.block_size), -1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(rec->called);
  // While 8 blocks are pinned, a request may use the other 16 only.
  auto too_big = f.se->submit([&] {
    engine::CompletionRequest r;
    r.prompt = std::vector<int32_t>(static_cast<size_t>(16 * f.block_size + 1), 5);
    return r;
  }(), std::make_shared<Recorder>());
  EXPECT_EQ(too_big.status().code(), StatusCode::kTooLarge);
  EXPECT_NE(too_big.status().message().find("pinned"), std::string::npos) << too_big.status().message();
  ASSERT_TRUE(f.se->pinner()->unpin(first->info.id).is_ok());
  expect_clean(*f.se);

  PinFixture off(40, 0.0);
  engine::PinRequest off_request;
  off_request.prompt = off.system_prompt(40);
  EXPECT_EQ(off.se->pinner()->pin(std::move(off_request), rec).code(), StatusCode::kInvalidArgument);
}

TEST(ServingPins, RequestQueuedBeforeAPinThatNoLongerFitsEndsWithAnError) {
  PinFixture f(16, 0.5);  // pins may hold 8 blocks
  const std::vector<int32_t> system = f.system_prompt(8 * f.block_size);
  auto cached = f.complete(system, 1);  // compute the prefix first: the pin needs only its last token
  run_to_end(*f.se);
  // A 12-block request passes submit (nothing pinned yet), then the pin lands before it runs.
  std::vector<int32_t> big(static_cast<size_t>(11 * f.block_size + 4), 7);
  auto rec = std::make_shared<PinRecorder>();
  engine::PinRequest pr;
  pr.prompt = system;
  ASSERT_TRUE(f.se->pinner()->pin(std::move(pr), rec).is_ok());
  auto late = f.complete(big, 2);
  run_to_end(*f.se);
  ASSERT_TRUE(rec->status.is_ok()) << rec->status.message();
  ASSERT_TRUE(late->finished());
  EXPECT_EQ(late->status().code(), StatusCode::kTooLarge) << late->status().message();
  expect_clean(*f.se);
}

}  // namespace
}  // namespace pagoda::testing
