// Hugging Face folders run the same model as GGUF files: the same random weights written as
// GGUF (ggml's Q/K row order) and as an HF folder (rotate_half order, the inverse of
// llama.cpp's convert permutation) give the same logits, for llama (F32/F16/BF16, single
// and sharded), qwen2 (q/k/v bias) and qwen3 (q/k norm, head_dim != width / heads); both
// match the float64 reference, also with llama3 and linear rope scaling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <random>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "hf_writer.h"
#include "model/format/hf_checkpoint.h"
#include "model/model_factory.h"
#include "reference_forward.h"
#include "reference_gemma3.h"

namespace pagoda {
namespace {

using reference::max_relative_error;
using reference::reference_logits;

std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda-hf-fwd-" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<int32_t> test_tokens(int64_t n_vocab) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 21; ++i) tokens.push_back((i * 37 + 5) % static_cast<int32_t>(n_vocab));
  return tokens;
}

// Logits of every token, prefill in chunks of 16 then decode.
std::vector<float> engine_logits(std::unique_ptr<model::LlamaModel> model, const std::vector<int32_t>& tokens) {
  static ManualClock clock;
  static Logger logger(LogLevel::kSilent);
  engine::EngineConfig config;
  config.num_threads = 2;
  config.max_batch_tokens = 16;
  config.block_size = 4;
  auto eng = engine::Engine::create(std::move(model), config, clock, logger);
  EXPECT_TRUE(eng.is_ok()) << eng.status().message();
  if (!eng.is_ok()) return {};
  auto got = eng.value()->score(tokens);
  EXPECT_TRUE(got.is_ok()) << got.status().message();
  return got.is_ok() ? *got : std::vector<float>{};
}

std::vector<float> gguf_logits(model::GgufFile file, const std::vector<int32_t>& tokens) {
  auto model = model::LlamaModel::load(std::move(file));
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  return model.is_ok() ? engine_logits(std::move(model).value(), tokens) : std::vector<float>{};
}

std::vector<float> hf_logits(const std::string& dir, const std::vector<int32_t>& tokens) {
  auto ck = model::HfCheckpoint::open(dir);
  EXPECT_TRUE(ck.is_ok()) << ck.status().message();
  if (!ck.is_ok()) return {};
  auto model = model::LlamaModel::load(std::move(ck).value());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  return model.is_ok() ? engine_logits(std::move(model).value(), tokens) : std::vector<float>{};
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(HfForward, LlamaAndQwen2FoldersMatchTheirGgufTwins) {
  struct Case {
    const char* label;
    model::ModelShape shape;
    DType dtype;
    int shards;
    bool vectors_f32;  // biases kept exact (the GGUF holds them in f32)
  };
  const std::vector<Case> cases = {
      {"llama GQA f32", {"t", 64, 2, 4, 2, 96, 300, 64}, DType::kF32, 1, false},
      {"llama MHA f16 sharded", {"t", 64, 2, 8, 8, 96, 300, 64}, DType::kF16, 3, false},
      {"llama MQA bf16", {"t", 128, 2, 2, 1, 96, 280, 64}, DType::kBF16, 2, false},
      {"llama window 7 f32", {"t", 64, 2, 8, 2, 96, 300, 64, "llama", 7}, DType::kF32, 1, false},
      {"qwen2 GQA f32", {"t", 64, 2, 4, 2, 96, 300, 64, "qwen2"}, DType::kF32, 1, false},
      {"qwen2 GQA bf16 sharded", {"t", 64, 2, 4, 2, 96, 300, 64, "qwen2"}, DType::kBF16, 2, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    auto gguf = model::make_random_model(c.shape, c.dtype, 31);
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
    const std::string dir = fresh_dir("twin");
    const char* dtype = c.dtype == DType::kF32 ? "F32" : c.dtype == DType::kF16 ? "F16" : "BF16";
    testing::write_hf_folder(*gguf, dir, {.dtype = dtype, .vectors_f32 = c.vectors_f32, .shards = c.shards});
    const auto tokens = test_tokens(c.shape.n_vocab);
    const std::vector<double> want = reference_logits(*gguf, c.shape, tokens);
    const std::vector<float> from_gguf = gguf_logits(std::move(gguf).value(), tokens);
    const std::vector<float> from_hf = hf_logits(dir, tokens);
    ASSERT_EQ(from_hf.size(), want.size());
    // Same weights bit for bit: only the order of float sums differs.
    EXPECT_LT(max_relative_error(from_hf, to_double(from_gguf), c.shape.n_vocab), 1e-4);
    EXPECT_LT(max_relative_error(from_hf, want, c.shape.n_vocab), 2e-4);
  }
}

// A qwen3 GGUF (q/k norm weights away from 1, head_dim 32 with width 64 and 4 heads) from
// a fixed seed; weights uniform in [-a, a], a = sqrt(3 / n_in).
model::GgufFile make_qwen3(const model::ModelShape& s, int64_t hd, uint32_t seed) {
  model::GgufFile f;
  const std::string a = "qwen3.";
  f.set("general.architecture", model::GgufValue::of_string("qwen3"));
  f.set(a + "context_length", model::GgufValue::of_u32(static_cast<uint32_t>(s.n_ctx)));
  f.set(a + "embedding_length", model::GgufValue::of_u32(static_cast<uint32_t>(s.n_embd)));
  f.set(a + "block_count", model::GgufValue::of_u32(static_cast<uint32_t>(s.n_layer)));
  f.set(a + "feed_forward_length", model::GgufValue::of_u32(static_cast<uint32_t>(s.n_ff)));
  f.set(a + "attention.head_count", model::GgufValue::of_u32(static_cast<uint32_t>(s.n_head)));
  f.set(a + "attention.head_count_kv", model::GgufValue::of_u32(static_cast<uint32_t>(s.n_kv_head)));
  f.set(a + "attention.key_length", model::GgufValue::of_u32(static_cast<uint32_t>(hd)));
  f.set(a + "rope.freq_base", model::GgufValue::of_f32(10000.0f));
  f.set(a + "attention.layer_norm_rms_epsilon", model::GgufValue::of_f32(1e-5f));
  std::mt19937 rng(seed);
  auto add = [&](const std::string& name, int64_t n_in, int64_t n_out, bool norm) {
    std::vector<float> v(n_in * n_out);
    const float lim = norm ? 0.5f : std::sqrt(3.0f / static_cast<float>(n_in));
    std::uniform_real_distribution<float> dist(-lim, lim);
    for (float& x : v) x = (norm ? 1.0f : 0.0f) + dist(rng);
    std::vector<int64_t> dims = n_out == 1 ? std::vector<int64_t>{n_in} : std::vector<int64_t>{n_in, n_out};
    EXPECT_TRUE(f.add_tensor(name, dims, model::kGgmlTypeF32, v.data(), v.size() * 4).is_ok()) << name;
  };
  add("token_embd.weight", s.n_embd, s.n_vocab, false);
  add("output.weight", s.n_embd, s.n_vocab, false);
  add("output_norm.weight", s.n_embd, 1, true);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", s.n_embd, 1, true);
    add(p + "ffn_norm.weight", s.n_embd, 1, true);
    add(p + "attn_q.weight", s.n_embd, s.n_head * hd, false);
    add(p + "attn_k.weight", s.n_embd, s.n_kv_head * hd, false);
    add(p + "attn_v.weight", s.n_embd, s.n_kv_head * hd, false);
    add(p + "attn_output.weight", s.n_head * hd, s.n_embd, false);
    add(p + "attn_q_norm.weight", hd, 1, true);
    add(p + "attn_k_norm.weight", hd, 1, true);
    add(p + "ffn_gate.weight", s.n_embd, s.n_ff, false);
    add(p + "ffn_up.weight", s.n_embd, s.n_ff, false);
    add(p + "ffn_down.weight", s.n_ff, s.n_embd, false);
  }
  return f;
}

TEST(HfForward, Qwen3QkNormMatchesReferenceInGgufAndHfForm) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 64, "qwen3"};
  const auto tokens = test_tokens(shape.n_vocab);
  model::GgufFile gguf = make_qwen3(shape, 32, 17);
  const std::vector<double> want = reference_logits(gguf, shape, tokens);
  for (const char* dtype : {"F32", "BF16"}) {
    SCOPED_TRACE(dtype);
    const std::string dir = fresh_dir(std::string("qwen3-") + dtype);
    testing::write_hf_folder(gguf, dir, {.dtype = dtype});
    const std::vector<float> from_hf = hf_logits(dir, tokens);
    ASSERT_EQ(from_hf.size(), want.size());
    // BF16: the folder's weights are rounded, so compare loosely against the f32 reference.
    EXPECT_LT(max_relative_error(from_hf, want, shape.n_vocab), std::string(dtype) == "F32" ? 2e-4 : 5e-2);
  }
  const std::vector<float> from_gguf = gguf_logits(std::move(gguf), tokens);
  EXPECT_LT(max_relative_error(from_gguf, want, shape.n_vocab), 2e-4);
}

// Llama 3.1 scaling written out from its definition (see hf_config_test for the regimes).
std::vector<double> llama3_inv_freq(int64_t hd, double factor, double low, double high, double original) {
  std::vector<double> out;
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double f = std::pow(10000.0, -2.0 * i / hd);
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen < original / high) out.push_back(f);
    else if (wavelen > original / low) out.push_back(f / factor);
    else {
      const double t = (original / wavelen - low) / (high - low);
      out.push_back(t * f + (1 - t) * f / factor);
    }
  }
  return out;
}

TEST(HfForward, RopeScalingMatchesReference) {
  const model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 64};  // head_dim 16
  const auto tokens = test_tokens(shape.n_vocab);
  auto gguf = model::make_random_model(shape, DType::kF32, 41);
  ASSERT_TRUE(gguf.is_ok());
  const std::vector<double> unscaled = reference_logits(*gguf, shape, tokens);
  // original 256: wavelengths 6.3, 20, 63 kept, 199 blended, 628.. scaled.
  const std::vector<double> l3 = llama3_inv_freq(16, 8.0, 1.0, 4.0, 256);
  std::vector<double> linear;
  for (int64_t i = 0; i < 8; ++i) linear.push_back(std::pow(10000.0, -2.0 * i / 16) / 4);
  struct Case {
    const char* label;
    nlohmann::json scaling;
    const std::vector<double>* inv_freq;
  };
  const std::vector<Case> cases = {
      {"llama3", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                  {"original_max_position_embeddings", 256}}, &l3},
      {"linear", {{"type", "linear"}, {"factor", 4.0}}, &linear},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string dir = fresh_dir(std::string("rope-") + c.label);
    testing::write_hf_folder(*gguf, dir, {.extra_config = {{"rope_scaling", c.scaling}}});
    const std::vector<double> want = reference_logits(*gguf, shape, tokens, {}, *c.inv_freq);
    ASSERT_GT(max_relative_error(std::vector<float>(want.begin(), want.end()), unscaled, shape.n_vocab), 1e-3)
        << "scaling too weak to test";
    const std::vector<float> from_hf = hf_logits(dir, tokens);
    EXPECT_LT(max_relative_error(from_hf, want, shape.n_vocab), 2e-4);
  }
  // GGUF: the same llama3 scaling as llama.cpp stores it, a rope_freqs.weight tensor of divisors.
  std::vector<float> divisors;
  for (int64_t i = 0; i < 8; ++i) divisors.push_back(static_cast<float>(std::pow(10000.0, -2.0 * i / 16) / l3[i]));
  ASSERT_TRUE(gguf->add_tensor("rope_freqs.weight", {8}, model::kGgmlTypeF32, divisors.data(), 32).is_ok());
  const std::vector<double> want = reference_logits(*gguf, shape, tokens, {}, l3);
  EXPECT_LT(max_relative_error(gguf_logits(std::move(gguf).value(), tokens), want, shape.n_vocab), 2e-4);
}

// Gemma 3 folders (Gemma3ForCausalLM: Gemma's norm names, norms stored as w with (1 + w)
// applied, GeGLU, sliding layers from sliding_window_pattern or layer_types, the local RoPE
// base, soft-capping) run as their GGUF twins and the float64 reference.
TEST(HfForward, Gemma3FoldersMatchTheirGgufTwins) {
  model::ModelShape capped = model::find_model_shape("tiny-gemma3").value();
  capped.logit_softcap = 3.0f;
  struct Case {
    const char* label;
    model::ModelShape shape;
    const char* dtype;
    nlohmann::json extra;
  };
  const std::vector<Case> cases = {
      {"pattern 3 f32", model::find_model_shape("tiny-gemma3").value(), "F32", nlohmann::json::object()},
      {"softcap 3, layer_types, bf16", capped, "BF16",
       {{"layer_types", {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention"}},
        {"sliding_window_pattern", nullptr}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    auto gguf = model::make_random_model(c.shape, DType::kF32, 41);
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
    const std::string dir = fresh_dir("gemma3");
    testing::write_hf_folder(*gguf, dir, {.dtype = c.dtype, .vectors_f32 = true, .extra_config = c.extra});
    const auto tokens = test_tokens(c.shape.n_vocab);
    const std::vector<double> want = reference::gemma3_reference_logits(*gguf, tokens);
    const std::vector<float> from_gguf = gguf_logits(std::move(gguf).value(), tokens);
    const std::vector<float> from_hf = hf_logits(dir, tokens);
    ASSERT_EQ(from_hf.size(), want.size());
    if (std::string(c.dtype) == "F32") {
      EXPECT_LT(max_relative_error(from_hf, to_double(from_gguf), c.shape.n_vocab), 1e-4);
      EXPECT_LT(max_relative_error(from_hf, want, c.shape.n_vocab), 2e-4);
    } else {  // bf16 matrices: the folder's weights are rounded, the GGUF's are not
      EXPECT_LT(max_relative_error(from_hf, to_double(from_gguf), c.shape.n_vocab), 5e-2);
    }
    // The GGUF `convert` would write from it reads back as the same model.
    auto ck = model::HfCheckpoint::open(dir);
    ASSERT_TRUE(ck.is_ok()) << ck.status().message();
    auto cfg = model::config_from_gguf(ck->metadata());
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    EXPECT_EQ(cfg->layer_window, ck->config().model.layer_window);
    EXPECT_EQ(cfg->rope_local.freq_base, ck->config().model.rope_local.freq_base);
    EXPECT_EQ(cfg->final_logit_softcap, ck->config().model.final_logit_softcap);
    EXPECT_EQ(cfg->attn_scale, ck->config().model.attn_scale);
  }
}

// Qwen3-MoE folders (Qwen3MoeForCausalLM: mlp.gate, one tensor per expert, read in place)
// run as their GGUF twins (one 3-D tensor per weight) and the float64 reference; configs whose
// routing Pagoda does not run are refused.
TEST(HfForward, Qwen3MoeFoldersMatchTheirGgufTwins) {
  const model::ModelShape shape = model::find_model_shape("tiny-qwen3moe").value();
  auto gguf = model::make_random_model(shape, DType::kF32, 43);
  ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
  const std::string dir = fresh_dir("qwen3moe");
  testing::write_hf_folder(*gguf, dir, {.tie = false});
  const auto tokens = test_tokens(shape.n_vocab);
  const std::vector<double> want = reference_logits(*gguf, shape, tokens);
  const std::vector<float> from_gguf = gguf_logits(std::move(gguf).value(), tokens);
  const std::vector<float> from_hf = hf_logits(dir, tokens);
  ASSERT_EQ(from_hf.size(), want.size());
  EXPECT_LT(max_relative_error(from_hf, to_double(from_gguf), shape.n_vocab), 1e-5);
  EXPECT_LT(max_relative_error(from_hf, want, shape.n_vocab), 2e-4);
  auto twin = model::make_random_model(shape, DType::kF32, 43);
  for (const auto& [patch, word] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"norm_topk_prob", false}}, "norm_topk_prob"},
           {{{"decoder_sparse_step", 2}}, "decoder_sparse_step"},
           {{{"mlp_only_layers", {0}}}, "mlp_only_layers"},
           {{{"num_experts_per_tok", 9}}, "9 used"}}) {
    const std::string bad = fresh_dir("qwen3moe-bad");
    testing::write_hf_folder(*twin, bad, {.extra_config = patch});
    auto ck = model::HfCheckpoint::open(bad);
    ASSERT_FALSE(ck.is_ok()) << patch.dump();
    EXPECT_NE(ck.status().message().find(word), std::string::npos) << ck.status().message();
  }
}

TEST(HfForward, Gemma3ConfigsPagodaCannotRunAreRefused) {
  auto gguf = model::make_random_model(model::find_model_shape("tiny-gemma3").value(), DType::kF32, 41);
  ASSERT_TRUE(gguf.is_ok());
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"hidden_activation", "silu"}}, "hidden_activation"},
      {{{"attn_logit_softcapping", 50.0}}, "attn_logit_softcapping"},
      {{{"query_pre_attn_scalar", 100}}, "query_pre_attn_scalar"},
      {{{"layer_types", {"sliding_attention"}}}, "layer_types"},
      {{{"layer_types", {"chunked", "full_attention", "full_attention", "full_attention"}}}, "chunked"},
  };
  for (const auto& [patch, word] : cases) {
    const std::string dir = fresh_dir("gemma3-bad");
    testing::write_hf_folder(*gguf, dir, {.extra_config = patch});
    auto ck = model::HfCheckpoint::open(dir);
    ASSERT_FALSE(ck.is_ok()) << patch.dump();
    EXPECT_NE(ck.status().message().find(word), std::string::npos) << ck.status().message();
  }
}

}  // namespace
}  // namespace pagoda
