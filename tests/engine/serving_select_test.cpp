// Attention-score KV selection (H2O, SnapKV; kvcache/kv_select.h) through continuous batching:
// a budget at least the sequence's length equals the full cache (the same tokens, logprobs to
// float rounding, f32 KV); a small budget served alone equals Engine::generate with the same chunks
// (SnapKV's observation window spanning prefill chunks); under a pool too small for the
// requests at once (recompute and swap preemption) every sequence holds at most its budget in
// every step, n > 1 choices are sequences of their own, the score buffer is not reallocated;
// refusals, the request dump and explain.
#include <algorithm>
#include <cmath>

#include "engine/introspection.h"
#include "kvcache/host_tier.h"
#include "serving_test_util.h"

namespace pagoda {
namespace {

using testing::Recorder;

kvcache::KvSelectParams sel(kvcache::KvSelectMethod m, int64_t budget, int64_t recent = 0, int64_t observe = 0) {
  kvcache::KvSelectParams p;
  p.method = m;
  p.budget = budget;
  p.recent = recent;
  p.observe = observe;
  EXPECT_TRUE(kvcache::normalize_kv_select(p).is_ok());
  return p;
}

engine::CompletionRequest completion(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed,
                                     std::optional<kvcache::KvSelectParams> select) {
  engine::CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling = engine::SamplingParams();
  r.sampling.temperature = 0.9f;
  r.sampling.seed = seed;
  r.logprobs = 2;
  r.kv_select = select;
  return r;
}

std::vector<int32_t> long_prompt(const model::Tokenizer& tok) {
  return tok.encode(std::string(testing::kStoryText), true, false);
}

struct Served {
  std::vector<engine::CompletionRequest> requests;
  std::vector<std::shared_ptr<Recorder>> recorders;
};

Served serve_all(engine::ServingEngine& se, std::vector<engine::CompletionRequest> requests) {
  Served out;
  out.requests = std::move(requests);
  for (const engine::CompletionRequest& r : out.requests) {
    out.recorders.push_back(std::make_shared<Recorder>());
    EXPECT_TRUE(se.submit(r, out.recorders.back()).is_ok());
  }
  testing::run_to_end(se);
  for (const auto& rec : out.recorders) EXPECT_TRUE(rec->status().is_ok()) << rec->status().message();
  return out;
}

TEST(ServingSelect, BudgetAtLeastTheLengthEqualsTheFullCache) {
  auto s = testing::load_stories();
  engine::ServingConfig sc;
  sc.max_num_seqs = 8;
  sc.max_num_batched_tokens = 64;
  auto se = testing::serving(*s, engine::EngineConfig{}, sc);  // f32 KV
  std::vector<engine::CompletionRequest> full, selected;
  for (int i = 0; i < 4; ++i) {
    const auto m = i % 2 == 0 ? kvcache::KvSelectMethod::kH2O : kvcache::KvSelectMethod::kSnapKv;
    const std::vector<int32_t> prompt = testing::mixed_prompt(*s->tokenizer, i);
    full.push_back(completion(prompt, 30, 7 + i, std::nullopt));
    selected.push_back(completion(prompt, 30, 7 + i, sel(m, 300, 20)));
    if (i == 1) full.back().n = selected.back().n = 3;
  }
  const Served a = serve_all(*se, full);
  const Served b = serve_all(*se, selected);
  double worst = 0.0;
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(b.recorders[i]->usage().cached_tokens, 0) << "selecting requests are not prefix-cached";
    for (int c = 0; c < full[i].n; ++c) {
      SCOPED_TRACE("request " + std::to_string(i) + " choice " + std::to_string(c));
      const testing::ChoiceRecord& x = a.recorders[i]->choice(c);
      const testing::ChoiceRecord& y = b.recorders[i]->choice(c);
      ASSERT_EQ(x.tokens.size(), 30u);
      EXPECT_EQ(x.tokens, y.tokens);
      ASSERT_EQ(x.events.size(), y.events.size());
      // Not bit for bit: the full cache's choices 1, 2 of request 1 are forks of choice 0 and
      // share its prefill, while selecting choices never fork and prefill on their own, which
      // moves the chunks of every later request too; f32 prefill rows go through sgemm, whose
      // row results depend on the call's row count and the row's place in it (Debian's
      // OpenBLAS 0.3.21 takes its Haswell kernels on a Zen 5; tests/kernels/matmul_test.cpp's
      // reference checks hold it to 1e-5 of sum |w||x|). Measured on 2026-12-06: 3e-6 apart.
      for (size_t k = 0; k < x.events.size(); ++k) {
        ASSERT_NEAR(x.events[k].chosen.logprob, y.events[k].chosen.logprob, 1e-4) << k;
        worst = std::max(worst, std::fabs(static_cast<double>(x.events[k].chosen.logprob) - y.events[k].chosen.logprob));
      }
    }
  }
  RecordProperty("worst_logprob_difference", std::to_string(worst));
  testing::expect_clean(*se);
}

TEST(ServingSelect, SmallBudgetServedAloneEqualsGenerate) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.max_batch_tokens = 16;  // prefill in chunks of 16 (SnapKV) or 12 (H2O: budget 32, recent 8)
  ec.num_threads = 1;
  ec.max_context = 512;
  auto reference = engine::Engine::create(s->model, ec, s->clock, s->logger);
  ASSERT_TRUE(reference.is_ok());
  engine::ServingConfig sc;
  sc.max_num_seqs = 4;
  sc.max_num_batched_tokens = 16;
  auto se = testing::serving(*s, ec, sc);
  const std::vector<int32_t> prompt = long_prompt(*s->tokenizer);
  ASSERT_GT(prompt.size(), 40u);
  // SnapKV's 20-row observation window spans the prompt's last two chunks.
  for (const kvcache::KvSelectParams& p : {sel(kvcache::KvSelectMethod::kH2O, 32, 8),
                                           sel(kvcache::KvSelectMethod::kSnapKv, 32, 8, 20)}) {
    SCOPED_TRACE(p.describe());
    const Served got = serve_all(*se, {completion(prompt, 40, 3, p)});
    engine::GenerateRequest g;
    g.prompt = prompt;
    g.max_new_tokens = 40;
    g.sampling = got.requests[0].sampling;
    g.kv_select = p;
    auto want = (*reference)->generate(g);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    EXPECT_EQ(got.recorders[0]->choice(0).tokens, want->tokens);
  }
  testing::expect_clean(*se);
}

class ServingSelectPreemption : public ::testing::TestWithParam<engine::PreemptionMode> {};

TEST_P(ServingSelectPreemption, EverySequenceHoldsAtMostItsBudget) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.num_threads = 1;
  ec.max_context = 512;
  ec.kv_cache_bytes = testing::pool_bytes(*s, 8);  // 128 tokens: two sequences of 48 and a bit
  auto e = engine::Engine::create(s->model, ec, s->clock, s->logger).value();
  if (GetParam() == engine::PreemptionMode::kSwap) {  // a host tier, so that swap is possible at all
    kvcache::HostTierOptions o;
    o.layout = e->kv_layout();
    o.capacity_bytes = 64 * (kvcache::record_bytes(kvcache::record_meta_for(o.layout)) + 64);
    std::vector<std::unique_ptr<kvcache::Tier>> tiers;
    tiers.push_back(kvcache::HostTier::create(o, s->clock).value());
    ASSERT_TRUE(e->attach_tiers(std::move(tiers), kvcache::OffloadMode::kWriteBack, engine::LoadCostModel::Mode::kAuto, {})
                    .is_ok());
  }
  engine::ServingConfig sc;
  sc.max_num_seqs = 8;
  sc.max_num_batched_tokens = 64;
  sc.preemption = GetParam();
  auto se = engine::ServingEngine::create(std::move(e), s->tokenizer, sc).value();
  const int64_t B = se->engine().kv_layout().block_size;
  std::vector<engine::CompletionRequest> requests;
  for (int i = 0; i < 5; ++i) {
    const auto m = i % 2 == 0 ? kvcache::KvSelectMethod::kH2O : kvcache::KvSelectMethod::kSnapKv;
    requests.push_back(completion(testing::mixed_prompt(*s->tokenizer, i), 90, 11 + i, sel(m, 48, 16)));
    if (i == 1) requests.back().n = 2;
  }
  std::vector<std::shared_ptr<Recorder>> recs;
  std::vector<engine::RequestId> ids;
  for (const engine::CompletionRequest& r : requests) {
    recs.push_back(std::make_shared<Recorder>());
    auto id = se->submit(r, recs.back());
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    ids.push_back(*id);
  }
  ASSERT_TRUE(se->step());
  const size_t score_capacity = se->engine().kv_score_capacity();
  EXPECT_GT(score_capacity, 0u) << "reserved at admission";
  int64_t steps = 1, seen_running = 0;
  while (se->step()) {
    ASSERT_LT(++steps, 20000);
    for (engine::RequestId id : ids) {
      auto kv = se->introspector()->request_kv(id);
      if (!kv.is_ok()) continue;  // finished
      for (const engine::SequenceKv& q : kv->sequences) {
        if (!q.running) continue;
        ++seen_running;
        // SnapKV holds its (short) prompt whole until it selects: at most the budget here too.
        ASSERT_LE(q.length, 48) << "request " << id << " step " << steps;
        ASSERT_LE(static_cast<int64_t>(q.blocks.size()), (48 + B - 1) / B);
        EXPECT_NE(q.kv_select.find("not prefix-cached"), std::string::npos) << q.kv_select;
      }
    }
    if (steps % 16 == 0) se->check_integrity();
  }
  EXPECT_GT(seen_running, 0);
  EXPECT_EQ(se->engine().kv_score_capacity(), score_capacity) << "the score buffer was reallocated in a step";
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(recs[i]->status().is_ok()) << recs[i]->status().message();
    EXPECT_EQ(recs[i]->usage().completion_tokens, 90 * requests[i].n);
    EXPECT_EQ(recs[i]->usage().cached_tokens, 0);
  }
  const engine::ServingMetrics m = se->metrics();
  EXPECT_GT(m.preemptions, 0) << "the pool is small enough to preempt";
  if (GetParam() == engine::PreemptionMode::kSwap) {
    EXPECT_EQ(m.swap_fallbacks, m.preemptions) << "selecting sequences have no hashed blocks to swap";
    EXPECT_EQ(m.swapped_out_blocks, 0);
  }
  testing::expect_clean(*se);
}

INSTANTIATE_TEST_SUITE_P(Modes, ServingSelectPreemption,
                         ::testing::Values(engine::PreemptionMode::kRecompute, engine::PreemptionMode::kSwap),
                         [](const auto& info) { return std::string(engine::preemption_mode_name(info.param)); });

TEST(ServingSelect, RefusalsDefaultsAndIntrospection) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.kv_select = sel(kvcache::KvSelectMethod::kH2O, 64);  // the server's default (--kv-select)
  engine::ServingConfig sc;
  auto se = testing::serving(*s, ec, sc);
  auto rec = std::make_shared<Recorder>();
  kvcache::KvSelectParams zero;
  zero.method = kvcache::KvSelectMethod::kH2O;  // budget 0
  auto bad = se->submit(completion({1, 2, 3}, 4, 1, zero), rec);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("budget"), std::string::npos) << bad.status().message();
  kvcache::KvSelectParams huge = sel(kvcache::KvSelectMethod::kH2O, 100000);
  EXPECT_EQ(se->submit(completion({1, 2, 3}, 4, 1, huge), rec).status().code(), StatusCode::kInvalidArgument);

  // The default selects (never cached); a request may turn it off (cached as usual).
  const std::vector<int32_t> prompt = long_prompt(*s->tokenizer);
  const kvcache::KvSelectParams off;
  const Served runs = serve_all(*se, {completion(prompt, 4, 1, std::nullopt), completion(prompt, 4, 1, off)});
  const Served again = serve_all(*se, {completion(prompt, 4, 1, std::nullopt), completion(prompt, 4, 1, off)});
  EXPECT_EQ(again.recorders[0]->usage().cached_tokens, 0);
  EXPECT_GT(again.recorders[1]->usage().cached_tokens, 0);

  engine::ExplainRequest x;
  x.prompt = prompt;
  auto selecting = se->introspector()->explain(x);
  ASSERT_TRUE(selecting.is_ok());
  EXPECT_EQ(selecting->cause, engine::ExplainCause::kKvSelect);
  EXPECT_NE(selecting->detail.find("h2o budget 64"), std::string::npos) << selecting->detail;
  x.kv_select = off;
  auto plain = se->introspector()->explain(x);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->cause, engine::ExplainCause::kFullHit) << plain->detail;

  // A windowed engine takes no selection.
  engine::EngineConfig wc;
  wc.kv_window = 64;
  wc.kv_sinks = 16;
  auto windowed = testing::serving(*s, wc, sc);
  auto w = windowed->submit(completion({1, 2, 3}, 4, 1, sel(kvcache::KvSelectMethod::kSnapKv, 32)), rec);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("window"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace pagoda
