// Windows in the engine:
//  * a sliding-window model frees blocks outside the window while generating, holds at most
//    ceil(W/B) + 1 blocks, and produces the same tokens as without freeing;
//  * StreamingLLM (kv_window, kv_sinks) scores and generates far more tokens than the pool
//    holds, at a constant number of blocks, and its logits at every step equal a float64
//    forward with the same cache eviction and cache positions (masked full attention over
//    sinks + window, K rotated at its cache index) -- this checks drop_block + rope_shift_k +
//    positions end to end;
//  * int4 KV with kv_window, and parallel samples of windowed sequences, are refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model_factory.h"
#include "reference_forward.h"

namespace pagoda {
namespace {

struct Env {
  ManualClock clock;
  Logger logger{LogLevel::kSilent};
};

Result<std::unique_ptr<engine::Engine>> make_engine(Env& env, const model::ModelShape& shape,
                                                   const engine::EngineConfig& config) {
  auto file = model::make_random_model(shape, DType::kF32, 7);
  if (!file.is_ok()) return file.status();
  auto model = model::LlamaModel::load(std::move(file).value());
  if (!model.is_ok()) return model.status();
  return engine::Engine::create(std::move(model).value(), config, env.clock, env.logger);
}

engine::GenerateRequest request_of(int64_t n_new) {
  engine::GenerateRequest r;
  for (int i = 0; i < 9; ++i) r.prompt.push_back(1 + (i * 31) % 90);
  r.max_new_tokens = n_new;
  r.sampling.temperature = 0.8f;  // sampled, seeded: tokens vary more than greedy loops
  r.sampling.seed = 5;
  return r;
}

TEST(EngineWindow, KvDumpShowsReleasedBlocksAsHoles) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 256, "llama", 10};
  Env env;
  engine::EngineConfig config;
  config.num_threads = 1;
  config.block_size = 4;
  auto eng = make_engine(env, shape, config);
  ASSERT_TRUE(eng.is_ok()) << eng.status().message();
  engine::GenerateRequest r = request_of(40);
  r.dump_kv = true;
  auto res = eng.value()->generate(r);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  ASSERT_TRUE(res->kv_dump.has_value());
  int holes = 0;
  for (const engine::KvBlockDump& b : res->kv_dump->blocks) {
    if (b.block_id < 0) {
      ++holes;
      EXPECT_EQ(b.state, "released");
    } else {
      EXPECT_EQ(b.state, "in use");
    }
  }
  EXPECT_GT(holes, 0);
  EXPECT_NE(engine::format_kv_dump(*res->kv_dump).find("released"), std::string::npos);
}

TEST(EngineWindow, SlidingWindowModelFreesBlocksWithoutChangingOutput) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 256, "llama", 10};
  for (int64_t batch : {1, 4}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Env env;
    engine::EngineConfig config;
    config.num_threads = 2;
    config.block_size = 4;
    config.max_batch_tokens = batch;
    auto freeing = make_engine(env, shape, config);
    config.free_out_of_window = false;
    auto keeping = make_engine(env, shape, config);
    ASSERT_TRUE(freeing.is_ok() && keeping.is_ok());
    engine::Engine& e = **freeing;
    int64_t max_in_use = 0;
    auto got = e.generate(request_of(120), [&](int32_t) {
      e.block_manager().check_integrity();
      max_in_use = std::max(max_in_use, e.block_manager().pool().num_in_use());
      return true;
    });
    auto want = (*keeping)->generate(request_of(120));
    ASSERT_TRUE(got.is_ok() && want.is_ok()) << got.status().message() << want.status().message();
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_EQ(got->tokens.size(), 120u);
    EXPECT_LE(max_in_use, (10 + 3) / 4 + 1);  // ceil(W/B) + 1
    EXPECT_LE(got->stats.kv_blocks_used, (10 + 3) / 4 + 1);
    EXPECT_GT(want->stats.kv_blocks_used, 30);
    e.block_manager().check_integrity();
    EXPECT_EQ(e.block_manager().pool().num_in_use(), 0);
  }
}

TEST(EngineWindow, StreamingMatchesFloat64ForwardWithCachePositions) {
  struct Variant {
    const char* arch;
    kernels::KvDType dtype;
    kernels::KvLayoutKind layout;
    int64_t block_size;
    double tol;  // relative logit error; quantized KV (re-encoded on every shift) looser
  };
  const Variant variants[] = {
      {"llama", kernels::KvDType::kF32, kernels::KvLayoutKind::kND, 4, 2e-4},
      {"qwen2", kernels::KvDType::kF32, kernels::KvLayoutKind::kND, 4, 2e-4},
      {"llama", kernels::KvDType::kF16, kernels::KvLayoutKind::kNZ, 16, 5e-3},
      {"qwen2", kernels::KvDType::kInt8, kernels::KvLayoutKind::kND, 4, 5e-2},
  };
  for (const Variant& v : variants) {
    const char* arch = v.arch;
    SCOPED_TRACE(std::string(arch) + " " + std::string(kernels::kv_dtype_name(v.dtype)) + " block " + std::to_string(v.block_size));
    const int64_t B = v.block_size;
    const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 64, arch};
    Env env;
    engine::EngineConfig config;
    config.num_threads = 2;
    config.block_size = B;
    config.kv_dtype = v.dtype;
    config.kv_layout = v.layout;
    config.max_batch_tokens = 1;  // one token per step, as the reference evicts
    config.kv_window = 3 * B + 2;  // rounded up to 4 blocks
    config.kv_sinks = B - 1;       // rounded up to 1 block
    config.max_context = 256;
    // A pool of 6 blocks, far fewer tokens than the 300 scored (and the model's context of 64).
    auto probe = make_engine(env, shape, config);
    ASSERT_TRUE(probe.is_ok()) << probe.status().message();
    config.kv_cache_bytes = 6 * (*probe)->kv_layout().bytes_per_block();
    auto eng = make_engine(env, shape, config);
    ASSERT_TRUE(eng.is_ok()) << eng.status().message();
    ASSERT_EQ((*eng)->kv_plan().num_blocks, 6);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 300; ++i) tokens.push_back((i * 37 + 5) % 300);
    auto got = (*eng)->score(tokens);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    auto file = model::make_random_model(shape, DType::kF32, 7);
    const std::vector<double> want =
        reference::reference_logits(*file, shape, tokens, reference::Streaming{B, 4 * B, B});
    const double err = reference::max_relative_error(*got, want, shape.n_vocab);
    EXPECT_LT(err, v.tol);
    std::printf("streaming %s: max relative logit error %.3g\n", kernels::kv_dtype_name(v.dtype).data(), err);
  }
}

TEST(EngineWindow, StreamingGeneratesPastThePoolAtConstantBlocks) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 64};
  for (kernels::KvDType dtype : {kernels::KvDType::kF32, kernels::KvDType::kInt8}) {
    Env env;
    engine::EngineConfig config;
    config.num_threads = 2;
    config.block_size = 4;
    config.max_batch_tokens = 5;  // prompt chunks larger than a block
    config.kv_dtype = dtype;
    config.kv_window = 16;
    config.kv_sinks = 4;
    auto probe = make_engine(env, shape, config);
    ASSERT_TRUE(probe.is_ok()) << probe.status().message();
    config.kv_cache_bytes = 5 * (*probe)->kv_layout().bytes_per_block();  // exactly sinks + window
    auto eng = make_engine(env, shape, config);
    ASSERT_TRUE(eng.is_ok()) << eng.status().message();
    engine::Engine& e = **eng;
    std::vector<int64_t> in_use;
    auto got = e.generate(request_of(300), [&](int32_t) {
      e.block_manager().check_integrity();
      in_use.push_back(e.block_manager().pool().num_in_use());
      return true;
    });
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(got->tokens.size(), 300u);
    for (size_t i = 40; i < in_use.size(); ++i) EXPECT_EQ(in_use[i], 5) << i;
    EXPECT_EQ(e.block_manager().index().size(), 0) << "streaming sequences are never cached";
  }
}

TEST(EngineWindow, RefusesInt4AndParallelWindowedSamples) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 64};
  Env env;
  engine::EngineConfig config;
  config.block_size = 4;
  config.kv_window = 16;
  config.kv_dtype = kernels::KvDType::kInt4;
  auto e = make_engine(env, shape, config);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("int4"), std::string::npos) << e.status().message();
  config.kv_dtype = kernels::KvDType::kF32;
  config.kv_sinks = 4;
  config.kv_window = 0;
  EXPECT_FALSE(make_engine(env, shape, config).is_ok()) << "sinks without a window";
  config.kv_window = 16;
  auto ok = make_engine(env, shape, config);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_FALSE((*ok)->generate_parallel(request_of(4), 2).is_ok());
}

}  // namespace
}  // namespace pagoda
