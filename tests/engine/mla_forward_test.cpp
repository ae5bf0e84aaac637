// deepseek2 (MLA) models through the engine: logits against a float64 forward pass written
// here over decompressed keys and values (k = [c W_UK | k_pe], v = c W_UV, no absorption), for
// plain q and q LoRA with YaRN, several block sizes, batch sizes and thread counts; the latent
// cache's size; quantized latent formats near f32; prefix caching and forks on latent blocks;
// DeepSeek's mixture of experts (V2 and V3 rules) against the same reference; broken expert
// keys refused with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "kernels/matmul.h"
#include "model/model_factory.h"
#include "reference_forward.h"

namespace pagoda {
namespace {

using reference::load_matrix;
using reference::Matrix;
using reference::matvec;
using reference::max_relative_error;
using reference::rmsnorm;

// YaRN inverse frequencies written out independently of model_config.cpp (ggml's rope_yarn
// with ext_factor 1): ramp between the corrections dims of beta_fast 32 and beta_slow 1.
std::vector<double> yarn_inv_freq(int64_t dr, double factor, double orig_ctx) {
  auto corr = [&](double beta) { return dr * std::log(orig_ctx / (beta * 2 * std::numbers::pi)) / (2 * std::log(10000.0)); };
  const double low = std::max(0.0, std::floor(corr(32))), high = std::min(double(dr - 1), std::ceil(corr(1)));
  std::vector<double> f(dr / 2);
  for (int64_t i = 0; i < dr / 2; ++i) {
    const double extrap = std::pow(10000.0, -2.0 * i / dr);
    const double mix = 1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
    f[i] = extrap / factor * (1 - mix) + extrap * mix;
  }
  return f;
}

std::vector<double> mla_reference_logits(const model::GgufFile& f, const model::ModelShape& s,
                                         const std::vector<int32_t>& tokens) {
  const int64_t H = s.n_head, r = s.kv_lora_rank, dn = s.qk_nope_dim, dr = s.qk_rope_dim, dv = s.v_head_dim;
  const double eps = 1e-6;
  std::vector<double> inv_freq(dr / 2);
  for (int64_t i = 0; i < dr / 2; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / dr);
  double mscale = 1;
  if (s.yarn_factor > 1) {
    inv_freq = yarn_inv_freq(dr, s.yarn_factor, s.n_ctx / s.yarn_factor);
    mscale = 1 + 0.0707 * std::log(s.yarn_factor);
  }
  const double scale = mscale * mscale / std::sqrt(double(dn + dr));
  auto rope = [&](double* v, int64_t pos) {  // adjacent pairs over dr values
    for (int64_t i = 0; i < dr / 2; ++i) {
      const double a = pos * inv_freq[i], x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
      v[2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  };
  const Matrix emb = load_matrix(f, "token_embd.weight"), out_norm = load_matrix(f, "output_norm.weight"),
               out = load_matrix(f, "output.weight");
  std::vector<reference::FfnLayer> ffn;
  for (int64_t l = 0; l < s.n_layer; ++l) ffn.push_back(reference::load_ffn(f, s, l));
  std::vector<std::vector<double>> c_cache(s.n_layer * tokens.size()), pe_cache(s.n_layer * tokens.size());
  std::vector<double> logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<double> x(emb.begin() + tokens[pos] * s.n_embd, emb.begin() + (tokens[pos] + 1) * s.n_embd);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      auto h = rmsnorm(x, load_matrix(f, p + "attn_norm.weight"), eps);
      std::vector<double> q;
      if (s.q_lora_rank > 0) {
        auto qa = rmsnorm(matvec(load_matrix(f, p + "attn_q_a.weight"), h, s.q_lora_rank),
                          load_matrix(f, p + "attn_q_a_norm.weight"), eps);
        q = matvec(load_matrix(f, p + "attn_q_b.weight"), qa, H * (dn + dr));
      } else {
        q = matvec(load_matrix(f, p + "attn_q.weight"), h, H * (dn + dr));
      }
      auto kva = matvec(load_matrix(f, p + "attn_kv_a_mqa.weight"), h, r + dr);
      std::vector<double> c = rmsnorm(std::vector<double>(kva.begin(), kva.begin() + r), load_matrix(f, p + "attn_kv_a_norm.weight"), eps);
      std::vector<double> pe(kva.begin() + r, kva.end());
      rope(pe.data(), pos);
      for (int64_t hh = 0; hh < H; ++hh) rope(q.data() + hh * (dn + dr) + dn, pos);
      c_cache[l * tokens.size() + pos] = c;
      pe_cache[l * tokens.size() + pos] = pe;
      const Matrix kv_b = load_matrix(f, p + "attn_kv_b.weight");  // [H * (dn + dv), r]
      std::vector<double> att(H * dv, 0.0);
      for (int64_t hh = 0; hh < H; ++hh) {
        std::vector<double> w(pos + 1);
        double mx = -1e300, sum = 0;
        for (size_t t = 0; t <= pos; ++t) {
          const auto& ct = c_cache[l * tokens.size() + t];
          double d = 0;
          for (int64_t i = 0; i < dn; ++i) {
            double k = 0;  // decompressed key
            for (int64_t j = 0; j < r; ++j) k += kv_b[(hh * (dn + dv) + i) * r + j] * ct[j];
            d += q[hh * (dn + dr) + i] * k;
          }
          for (int64_t i = 0; i < dr; ++i) d += q[hh * (dn + dr) + dn + i] * pe_cache[l * tokens.size() + t][i];
          w[t] = d * scale;
          mx = std::max(mx, w[t]);
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (size_t t = 0; t <= pos; ++t) {
          const auto& ct = c_cache[l * tokens.size() + t];
          for (int64_t o = 0; o < dv; ++o) {
            double v = 0;  // decompressed value
            for (int64_t j = 0; j < r; ++j) v += kv_b[(hh * (dn + dv) + dn + o) * r + j] * ct[j];
            att[hh * dv + o] += w[t] / sum * v;
          }
        }
      }
      auto o = matvec(load_matrix(f, p + "attn_output.weight"), att, s.n_embd);
      for (int64_t i = 0; i < s.n_embd; ++i) x[i] += o[i];
      h = rmsnorm(x, load_matrix(f, p + "ffn_norm.weight"), eps);
      auto dd = reference::reference_ffn(ffn[l], s, h);  // dense, or DeepSeek's experts
      for (int64_t i = 0; i < s.n_embd; ++i) x[i] += dd[i];
    }
    auto y = matvec(out, rmsnorm(x, out_norm, eps), s.n_vocab);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

std::unique_ptr<engine::Engine> make_engine(const model::ModelShape& shape, const engine::EngineConfig& config,
                                            DType dtype = DType::kF32) {
  static ManualClock clock;
  static Logger logger(LogLevel::kSilent);
  auto file = model::make_random_model(shape, dtype, 7);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  auto model = model::LlamaModel::load(std::move(file).value());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  auto eng = engine::Engine::create(std::move(model).value(), config, clock, logger);
  EXPECT_TRUE(eng.is_ok()) << eng.status().message();
  return std::move(eng).value();
}

std::vector<int32_t> some_tokens(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + 5) % n_vocab));
  return t;
}

TEST(MlaForward, EngineMatchesDecompressedFloat64Reference) {
  for (const char* name : {"tiny-mla", "tiny-mla-q"}) {
    SCOPED_TRACE(name);
    auto shape = model::find_model_shape(name).value();
    auto file = model::make_random_model(shape, DType::kF32, 7);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const std::vector<int32_t> tokens = some_tokens(21, shape.n_vocab);
    const std::vector<double> want = mla_reference_logits(*file, shape, tokens);
    for (int64_t block_size : {4, 16}) {
      for (int64_t batch : {1, 16}) {
        for (int threads : {1, 2}) {
          SCOPED_TRACE("block " + std::to_string(block_size) + " batch " + std::to_string(batch) + " threads " +
                       std::to_string(threads));
          engine::EngineConfig config;
          config.block_size = block_size;
          config.max_batch_tokens = batch;
          config.num_threads = threads;
          auto eng = make_engine(shape, config);
          EXPECT_TRUE(eng->kv_layout().k_only);
          EXPECT_EQ(eng->kv_layout().n_kv_head, 1);
          EXPECT_EQ(eng->kv_layout().head_dim, shape.kv_lora_rank + shape.qk_rope_dim);
          auto got = eng->score(tokens);
          ASSERT_TRUE(got.is_ok()) << got.status().message();
          EXPECT_LT(max_relative_error(*got, want, shape.n_vocab), 2e-4);
        }
      }
    }
  }
}

// Every prefill form (the absorbed GEMMs, the expanded GEMMs, the row walk, and auto's choice)
// gives the float64 reference's logits, also in one step that mixes a 16-row prefill chunk
// (expanded) with decode rows of other sequences (absorbed: their queries are gathered).
TEST(MlaForward, EveryPrefillFormAndMixedStepsMatchFloat64Reference) {
  auto shape = model::find_model_shape("tiny-mla-q").value();
  auto file = model::make_random_model(shape, DType::kF32, 7);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const std::vector<int32_t> tokens = some_tokens(37, shape.n_vocab);
  const std::vector<double> want = mla_reference_logits(*file, shape, tokens);
  const int64_t V = shape.n_vocab;
  for (model::MlaPrefill form : {model::MlaPrefill::kAuto, model::MlaPrefill::kAbsorbed, model::MlaPrefill::kExpanded,
                                 model::MlaPrefill::kRowWalk}) {
    SCOPED_TRACE("form " + std::to_string(static_cast<int>(form)));
    engine::EngineConfig config;
    config.block_size = 4;
    config.max_batch_tokens = 32;
    config.mla_prefill = form;
    config.enable_prefix_caching = false;
    auto eng = make_engine(shape, config);
    auto got = eng->score(tokens);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_LT(max_relative_error(*got, want, V), 2e-4);
    // A: tokens[0, 20) then one row at a time; B: one row at a time, then 17 rows at once
    // beside A's decode rows.
    kvcache::BlockManager& bm = eng->block_manager();
    kvcache::SequenceOptions options;
    options.ns = eng->kv_namespace("");
    const kvcache::SeqId a = bm.add_sequence(64, options);
    const kvcache::SeqId b = bm.add_sequence(64, options);
    std::vector<float> logits(32 * V);
    auto step = [&](std::vector<engine::Engine::StepSeq> seqs) {
      ASSERT_TRUE(eng->step(seqs, true, logits.data()).is_ok());
    };
    auto expect_rows = [&](int64_t row, int64_t first_pos, int64_t n, const char* what) {
      const std::vector<float> rows(logits.begin() + row * V, logits.begin() + (row + n) * V);
      const std::vector<double> ref(want.begin() + first_pos * V, want.begin() + (first_pos + n) * V);
      EXPECT_LT(max_relative_error(rows, ref, V), 2e-4) << what;
    };
    const std::span<const int32_t> all(tokens);
    step({{a, all.subspan(0, 20)}});
    expect_rows(0, 0, 20, "A's 20-row prefill");
    step({{b, all.subspan(0, 1)}, {a, all.subspan(20, 1)}});
    expect_rows(0, 0, 1, "B's first row");
    expect_rows(1, 20, 1, "A's decode row");
    step({{a, all.subspan(21, 1)}, {b, all.subspan(1, 17)}});
    expect_rows(0, 21, 1, "A's decode row beside B's chunk");
    expect_rows(1, 1, 17, "B's 17-row chunk beside A's decode row");
    bm.free_sequence(a);
    bm.free_sequence(b);
  }
}

TEST(MlaForward, LatentCacheHoldsOneRowPerTokenAndQuantizedFormatsStayClose) {
  auto shape = model::find_model_shape("tiny-mla-q").value();
  engine::EngineConfig f32;
  auto base = make_engine(shape, f32);
  // 2 layers x (32 + 8) f32 values per token, no V: a GQA cache of 4 heads x 24 would be 1536.
  EXPECT_EQ(base->kv_layout().bytes_per_token(), 2 * 40 * 4);
  const std::vector<int32_t> tokens = some_tokens(40, shape.n_vocab);
  auto want = base->score(tokens);
  ASSERT_TRUE(want.is_ok());
  std::vector<double> want_d(want->begin(), want->end());
  struct Format {
    kernels::KvDType dtype;
    double tolerance;
  };
  for (Format fmt : {Format{kernels::KvDType::kF16, 2e-3}, Format{kernels::KvDType::kBF16, 2e-2},
                     Format{kernels::KvDType::kInt8, 3e-2}, Format{kernels::KvDType::kFp8E4M3, 0.15},
                     Format{kernels::KvDType::kInt4, 0.5}}) {
    SCOPED_TRACE(std::string(kernels::kv_dtype_name(fmt.dtype)));
    engine::EngineConfig config;
    config.kv_dtype = fmt.dtype;
    auto eng = make_engine(shape, config);
    EXPECT_EQ(eng->kv_layout().v_block_bytes(), 0);
    EXPECT_EQ(eng->kv_layout().bytes_per_block(), 2 * kernels::kv_block_bytes_k(fmt.dtype, 40, 16, 1));
    auto got = eng->score(tokens);
    ASSERT_TRUE(got.is_ok());
    const double err = max_relative_error(*got, want_d, shape.n_vocab);
    EXPECT_LT(err, fmt.tolerance);
    EXPECT_GT(err, 0.0);  // the format did change the cache
  }
}

TEST(MlaForward, PrefixCacheAndForksOnLatentBlocks) {
  auto shape = model::find_model_shape("tiny-mla").value();
  engine::EngineConfig on, off;
  on.max_batch_tokens = off.max_batch_tokens = 1;  // same kernels for cached and computed rows
  off.enable_prefix_caching = false;
  auto cached = make_engine(shape, on);
  auto plain = make_engine(shape, off);
  engine::GenerateRequest first;
  first.prompt = some_tokens(37, shape.n_vocab);
  first.max_new_tokens = 4;
  ASSERT_TRUE(cached->generate(first).is_ok());
  engine::GenerateRequest second = first;
  for (int i = 0; i < 9; ++i) second.prompt.push_back(static_cast<int32_t>(100 + i));
  second.max_new_tokens = 12;
  auto hit = cached->generate(second);
  auto miss = plain->generate(second);
  ASSERT_TRUE(hit.is_ok() && miss.is_ok());
  EXPECT_EQ(hit->stats.cached_tokens, 32);
  EXPECT_EQ(miss->stats.cached_tokens, 0);
  EXPECT_EQ(hit->tokens, miss->tokens);
  // Forked samples share the prompt's latent blocks; each equals its own generate().
  engine::EngineConfig batched;
  batched.max_batch_tokens = 16;
  batched.enable_prefix_caching = false;
  auto forking = make_engine(shape, batched);
  plain = make_engine(shape, batched);
  engine::GenerateRequest sampled = second;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 3;
  auto par = forking->generate_parallel(sampled, 3);
  ASSERT_TRUE(par.is_ok()) << par.status().message();
  EXPECT_LT(par->kv_blocks_shared, par->kv_blocks_independent);
  for (int i = 0; i < 3; ++i) {
    engine::GenerateRequest one = sampled;
    one.sampling.seed = 3 + i;
    auto single = plain->generate(one);
    ASSERT_TRUE(single.is_ok());
    EXPECT_EQ(par->samples[i].tokens, single->tokens) << "sample " << i;
  }
  cached->block_manager().check_integrity();
  forking->block_manager().check_integrity();
}

// Decode rows past kMlaHeadsMinContext positions attend as GEMMs over their heads: one row at a
// time over 300 positions gives the float64 reference's logits, as the row walk does.
TEST(MlaForward, DecodeRowsOverALongContextMatchFloat64Reference) {
  auto shape = model::find_model_shape("tiny-mla-q").value();
  auto file = model::make_random_model(shape, DType::kF32, 7);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const std::vector<int32_t> tokens = some_tokens(kernels::kMlaHeadsMinContext + 44, shape.n_vocab);
  const std::vector<double> want = mla_reference_logits(*file, shape, tokens);
  for (model::MlaPrefill form : {model::MlaPrefill::kAuto, model::MlaPrefill::kRowWalk}) {
    SCOPED_TRACE("form " + std::to_string(static_cast<int>(form)));
    engine::EngineConfig config;
    config.block_size = 16;
    config.max_batch_tokens = 1;
    config.mla_prefill = form;
    auto eng = make_engine(shape, config);
    auto got = eng->score(tokens);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_LT(max_relative_error(*got, want, shape.n_vocab), 2e-4);
  }
}

// DeepSeek's mixture of experts on MLA layers (layer 0 dense, then experts and shared experts):
// V2's rule and V3's (sigmoid, bias, groups, scale) against the float64 reference, f32 and
// q8_0 weights, one-token and 16-token chunks, on every ISA this CPU runs.
TEST(MlaForward, DeepSeekExpertsMatchFloat64Reference) {
  for (const char* name : {"tiny-dsv2moe", "tiny-dsv3moe"}) {
    SCOPED_TRACE(name);
    auto shape = model::find_model_shape(name).value();
    for (DType dtype : {DType::kF32, DType::kQ8_0}) {
      SCOPED_TRACE(dtype_name(dtype));
      auto file = model::make_random_model(shape, dtype, 7);
      ASSERT_TRUE(file.is_ok()) << file.status().message();
      EXPECT_NE(file->find_tensor("blk.0.ffn_gate.weight"), nullptr);  // the leading dense layer
      EXPECT_NE(file->find_tensor("blk.1.ffn_gate_shexp.weight"), nullptr);
      const std::vector<int32_t> tokens = some_tokens(21, shape.n_vocab);
      const std::vector<double> want = mla_reference_logits(*file, shape, tokens);
      for (kernels::Isa isa : kernels::supported_isas()) {
        for (int64_t batch : {1, 16}) {
          SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " batch " + std::to_string(batch));
          engine::EngineConfig config;
          config.block_size = 4;
          config.max_batch_tokens = batch;
          config.isa = isa;
          auto eng = make_engine(shape, config, dtype);
          const model::ModelConfig& c = eng->model().config();
          EXPECT_TRUE(c.is_moe() && !c.is_moe_layer(0) && c.is_moe_layer(1));
          EXPECT_EQ(c.n_expert_shared, shape.n_expert_shared);
          EXPECT_EQ(c.routing.gating, shape.routing.gating);
          EXPECT_EQ(c.routing.n_groups, shape.routing.n_groups);
          auto got = eng->score(tokens);
          ASSERT_TRUE(got.is_ok()) << got.status().message();
          EXPECT_LT(max_relative_error(*got, want, shape.n_vocab), dtype == DType::kF32 ? 2e-4 : 5e-2);
        }
      }
    }
  }
}

TEST(MlaForward, RefusesBrokenExpertKeysAndWindowsWithClearErrors) {
  auto shape = model::find_model_shape("tiny-dsv3moe").value();
  struct Case {
    const char* key;
    model::GgufValue value;
    const char* words;
  };
  const std::vector<Case> cases = {
      {"deepseek2.expert_gating_func", model::GgufValue::of_u32(3), "expert_gating_func 3"},
      {"deepseek2.expert_group_count", model::GgufValue::of_u32(3), "expert groups"},       // 8 % 3
      {"deepseek2.expert_group_used_count", model::GgufValue::of_u32(0), "expert groups"},
      {"deepseek2.expert_group_count", model::GgufValue::of_u32(8), "expert groups"},       // 1 per group
      {"deepseek2.expert_used_count", model::GgufValue::of_u32(5), "expert groups"},        // 2 groups of 2
      {"deepseek2.expert_weights_scale", model::GgufValue::of_f32(-1), "expert_weights_scale"},
      {"deepseek2.leading_dense_block_count", model::GgufValue::of_u32(0), "ffn_gate_inp"},  // layer 0 is dense
  };
  for (const Case& c : cases) {
    auto file = model::make_random_model(shape, DType::kF32, 7);
    ASSERT_TRUE(file.is_ok());
    file->set(c.key, c.value);
    auto model = model::LlamaModel::load(std::move(file).value());
    ASSERT_FALSE(model.is_ok()) << c.key;
    EXPECT_NE(model.status().message().find(c.words), std::string::npos) << model.status().message();
  }
  shape = model::find_model_shape("tiny-mla").value();
  auto dense = model::LlamaModel::load(model::make_random_model(shape, DType::kF32, 7).value());
  ASSERT_TRUE(dense.is_ok());
  engine::EngineConfig config;
  config.kv_window = 64;
  static ManualClock clock;
  static Logger logger(LogLevel::kSilent);
  auto eng = engine::Engine::create(std::move(dense).value(), config, clock, logger);
  ASSERT_FALSE(eng.is_ok());
  EXPECT_NE(eng.status().message().find("MLA"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
