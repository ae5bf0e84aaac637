// Swap preemption (--preemption swap, engine/scheduler.h) on stories260K with f32 KV and a pool
// too small for the requests at once: a preempted request's committed blocks go into the host
// tier and are loaded back when it resumes. Its output equals the recompute run's and the
// unpreempted one's (Engine::generate), greedy and seeded; without a host tier swap falls back
// to recompute and counts it.
#include <gtest/gtest.h>

#include "kvcache/host_tier.h"
#include "serving_test_util.h"

namespace pagoda {
namespace {

using testing::Recorder;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // [request] choice 0's tokens
  engine::ServingMetrics metrics;
};

class ServingSwap : public ::testing::TestWithParam<bool> {  // param: seeded sampling
 protected:
  void SetUp() override { s_ = testing::load_stories(); }

  std::vector<engine::CompletionRequest> requests() const {
    std::vector<engine::CompletionRequest> all;
    for (int i = 0; i < 8; ++i) {
      engine::CompletionRequest r;
      r.prompt = testing::mixed_prompt(*s_->tokenizer, i);
      r.max_tokens = 12 + (i * 7) % 29;
      r.ignore_eos = true;
      if (GetParam()) {
        r.sampling = engine::SamplingParams();
        r.sampling.temperature = 0.9f;
        r.sampling.seed = 100 + static_cast<uint64_t>(i);
      }
      all.push_back(std::move(r));
    }
    return all;
  }

  // Every request at once over a pool of `pool_blocks`, with a host tier of `host_blocks` (0: none).
  Outcome run(engine::PreemptionMode mode, int64_t pool_blocks, int64_t host_blocks) {
    engine::EngineConfig ec;
    ec.num_threads = 1;
    ec.max_context = s_->reference->max_context();
    ec.kv_cache_bytes = testing::pool_bytes(*s_, pool_blocks);
    auto e = engine::Engine::create(s_->model, ec, s_->clock, s_->logger).value();
    if (host_blocks > 0) {
      kvcache::HostTierOptions o;
      o.layout = s_->reference->kv_layout();
      o.capacity_bytes = host_blocks * (kvcache::record_bytes(kvcache::record_meta_for(o.layout)) + 64);
      std::vector<std::unique_ptr<kvcache::Tier>> tiers;
      tiers.push_back(kvcache::HostTier::create(o, clock_).value());
      EXPECT_TRUE(e->attach_tiers(std::move(tiers), kvcache::OffloadMode::kWriteBack,
                                  engine::LoadCostModel::Mode::kAuto, {})
                      .is_ok());
    }
    engine::ServingConfig sc;
    sc.max_num_seqs = 8;
    sc.max_num_batched_tokens = 64;
    sc.preemption = mode;
    auto se = engine::ServingEngine::create(std::move(e), s_->tokenizer, sc).value();
    std::vector<std::shared_ptr<Recorder>> recs;
    for (const engine::CompletionRequest& r : requests()) {
      recs.push_back(std::make_shared<Recorder>());
      EXPECT_TRUE(se->submit(r, recs.back()).is_ok());
    }
    int64_t steps = 0;
    while (se->step()) {
      if (++steps % 8 == 0) se->check_integrity();  // pool and tiers agree between steps
      if (steps > 100000) break;
    }
    Outcome out;
    for (const auto& rec : recs) {
      EXPECT_TRUE(rec->finished());
      EXPECT_TRUE(rec->status().is_ok()) << rec->status().message();
      out.tokens.push_back(rec->choice(0).tokens);
    }
    out.metrics = se->metrics();
    testing::expect_clean(*se);
    return out;
  }

  std::vector<std::vector<int32_t>> unpreempted() const {
    std::vector<std::vector<int32_t>> out;
    for (const engine::CompletionRequest& r : requests()) {
      engine::GenerateRequest g;
      g.prompt = r.prompt;
      g.max_new_tokens = r.max_tokens;
      g.sampling = r.sampling;
      out.push_back(s_->reference->generate(g).value().tokens);
    }
    return out;
  }

  std::unique_ptr<testing::Stories> s_;
  ManualClock clock_;
};

TEST_P(ServingSwap, SwapEqualsRecomputeEqualsNoPreemption) {
  const Outcome recompute = run(engine::PreemptionMode::kRecompute, /*pool=*/12, /*host=*/0);
  const Outcome swap = run(engine::PreemptionMode::kSwap, 12, /*host=*/128);
  EXPECT_GT(recompute.metrics.preemptions, 0) << "the pool is small enough to preempt";
  EXPECT_GT(swap.metrics.preemptions, 0);
  EXPECT_GT(swap.metrics.swapped_out_blocks, 0) << "victims' blocks went into the host tier";
  EXPECT_GT(swap.metrics.swapped_in_blocks, 0) << "and came back from it on resumption";
  EXPECT_EQ(swap.metrics.swap_fallbacks, 0);
  EXPECT_EQ(recompute.metrics.swapped_out_blocks, 0);
  const auto reference = unpreempted();
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_EQ(recompute.tokens[i], reference[i]) << "request " << i;
    EXPECT_EQ(swap.tokens[i], reference[i]) << "request " << i;
  }
}

TEST_P(ServingSwap, WithoutAHostTierSwapFallsBackToRecompute) {
  const Outcome swap = run(engine::PreemptionMode::kSwap, 12, /*host=*/0);
  EXPECT_GT(swap.metrics.preemptions, 0);
  EXPECT_EQ(swap.metrics.swap_fallbacks, swap.metrics.preemptions);
  EXPECT_EQ(swap.metrics.swapped_out_blocks, 0);
  EXPECT_EQ(swap.tokens, unpreempted());
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSeeded, ServingSwap, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Seeded" : "Greedy"; });

}  // namespace
}  // namespace pagoda
