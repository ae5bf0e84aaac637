// Attention-score KV selection in the engine (kvcache/kv_select.h): with a budget at least the
// sequence's length nothing is evicted and logits and tokens equal the full cache bit for bit;
// with a small budget H2O and SnapKV hold at most the budget (blocks freed by compaction),
// generate past it with logical RoPE positions, and differ from the full cache only slightly;
// unsupported combinations are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model_factory.h"

namespace pagoda {
namespace {

struct Env {
  ManualClock clock;
  Logger logger{LogLevel::kSilent};
};

Result<std::unique_ptr<engine::Engine>> make_engine(Env& env, const engine::EngineConfig& config) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 512, "llama"};
  auto file = model::make_random_model(shape, DType::kF32, 7);
  if (!file.is_ok()) return file.status();
  auto model = model::LlamaModel::load(std::move(file).value());
  if (!model.is_ok()) return model.status();
  return engine::Engine::create(std::move(model).value(), config, env.clock, env.logger);
}

kvcache::KvSelectParams select(kvcache::KvSelectMethod m, int64_t budget, int64_t recent = 0) {
  kvcache::KvSelectParams p;
  p.method = m;
  p.budget = budget;
  p.recent = recent;
  return p;
}

std::vector<int32_t> tokens_of(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(1 + (i * 37 + i * i) % 250);
  return t;
}

engine::EngineConfig base_config() {
  engine::EngineConfig c;
  c.num_threads = 2;
  c.block_size = 4;
  c.max_batch_tokens = 32;
  return c;
}

TEST(EngineSelect, BudgetAboveLengthEqualsFullCacheBitForBit) {
  Env env;
  auto eng = make_engine(env, base_config());
  ASSERT_TRUE(eng.is_ok()) << eng.status().message();
  engine::Engine& e = **eng;
  const std::vector<int32_t> toks = tokens_of(90);
  auto full = e.score(toks);
  ASSERT_TRUE(full.is_ok());
  for (auto m : {kvcache::KvSelectMethod::kH2O, kvcache::KvSelectMethod::kSnapKv}) {
    SCOPED_TRACE(std::string(kvcache::kv_select_method_name(m)));
    auto sel = e.score(toks, select(m, 200, 20), 64);  // chunks as score()'s: 32 rows
    ASSERT_TRUE(sel.is_ok()) << sel.status().message();
    ASSERT_EQ(sel->size(), full->size());
    for (size_t i = 0; i < full->size(); ++i) ASSERT_EQ((*sel)[i], (*full)[i]) << i;
    engine::GenerateRequest r;
    r.prompt = tokens_of(30);
    r.max_new_tokens = 40;
    auto want = e.generate(r);
    r.kv_select = select(m, 100, 10);
    auto got = e.generate(r);
    ASSERT_TRUE(want.is_ok() && got.is_ok()) << got.status().message();
    EXPECT_EQ(got->tokens, want->tokens);
  }
}

TEST(EngineSelect, SmallBudgetHoldsAtMostBudgetAndDriftsLittle) {
  Env env;
  auto eng = make_engine(env, base_config());
  ASSERT_TRUE(eng.is_ok()) << eng.status().message();
  engine::Engine& e = **eng;
  for (auto m : {kvcache::KvSelectMethod::kH2O, kvcache::KvSelectMethod::kSnapKv}) {
    SCOPED_TRACE(std::string(kvcache::kv_select_method_name(m)));
    engine::GenerateRequest r;
    r.prompt = tokens_of(m == kvcache::KvSelectMethod::kSnapKv ? 40 : 60);
    r.max_new_tokens = 80;
    r.kv_select = select(m, 24, 8);
    r.dump_kv = true;
    int64_t max_held = 0;
    kvcache::BlockManager& bm = e.block_manager();
    const int64_t indexed = bm.index().size();
    int steps = 0;
    auto got = e.generate(r, [&](int32_t) {
      bm.check_integrity();
      if (++steps > 1) {  // after the first decode step (SnapKV: after its selection)
        max_held = std::max(max_held, bm.pool().num_in_use());
      }
      return true;
    });
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(got->tokens.size(), 80u);
    EXPECT_LE(max_held, 24 / 4 + 1);  // budget in blocks (+1: the row appended this step)
    ASSERT_TRUE(got->kv_dump.has_value());
    EXPECT_LE(got->kv_dump->length, 24);
    EXPECT_EQ(got->kv_dump->next_position, static_cast<int64_t>(r.prompt.size()) + 79);
    EXPECT_GT(got->kv_dump->num_evicted, 0);
    EXPECT_NE(engine::format_kv_dump(*got->kv_dump).find("not prefix-cached"), std::string::npos);
    EXPECT_EQ(bm.pool().num_in_use(), 0);
    EXPECT_EQ(bm.index().size(), indexed) << "selecting sequences are never prefix-cached";
    // Scored: logits stay finite, and a larger budget is closer to the full cache.
    const std::vector<int32_t> toks = tokens_of(120);
    auto full = e.score(toks);
    ASSERT_TRUE(full.is_ok());
    auto distance = [&](int64_t budget) {
      auto sel = e.score(toks, select(m, budget, 16), 60);
      EXPECT_TRUE(sel.is_ok()) << sel.status().message();
      double d = 0;
      for (int64_t i = 60 * 300; i < 120 * 300; ++i) {
        EXPECT_TRUE(std::isfinite((*sel)[i]));
        d += std::fabs((*sel)[i] - (*full)[i]);
      }
      return d;
    };
    const double small = distance(32), large = distance(100);
    EXPECT_GT(small, 0.0) << "a budget below the length must evict something";
    EXPECT_LT(large, small);
  }
}

TEST(EngineSelect, RefusesWhatItCannotDo) {
  Env env;
  engine::EngineConfig c = base_config();
  c.kv_select = select(kvcache::KvSelectMethod::kH2O, 16, 16);
  auto bad = make_engine(env, c);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("recent"), std::string::npos) << bad.status().message();
  c.kv_select = select(kvcache::KvSelectMethod::kH2O, 16);
  c.kv_dtype = kernels::KvDType::kInt4;
  auto int4 = make_engine(env, c);
  ASSERT_FALSE(int4.is_ok());
  EXPECT_NE(int4.status().message().find("int4"), std::string::npos);
  c.kv_dtype = kernels::KvDType::kF32;
  auto ok = make_engine(env, c);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  engine::GenerateRequest r;
  r.prompt = tokens_of(10);
  r.max_new_tokens = 5;
  auto par = (*ok)->generate_parallel(r, 2);
  ASSERT_FALSE(par.is_ok());
  EXPECT_NE(par.status().message().find("selecting"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
