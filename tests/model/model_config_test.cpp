// ModelConfig from GGUF metadata: qwen3, head_dim from attention.key_length, llama.cpp's
// rope_freqs tensor, and the errors of validate_config.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model/format/gguf.h"
#include "model/model_factory.h"

namespace pagoda::model {
namespace {

GgufFile base(const std::string& arch) {
  GgufFile f;
  const std::string a = arch + ".";
  f.set("general.architecture", GgufValue::of_string(arch));
  f.set(a + "embedding_length", GgufValue::of_u32(64));
  f.set(a + "block_count", GgufValue::of_u32(2));
  f.set(a + "attention.head_count", GgufValue::of_u32(4));
  f.set(a + "attention.head_count_kv", GgufValue::of_u32(2));
  f.set(a + "feed_forward_length", GgufValue::of_u32(96));
  f.set(a + "vocab_size", GgufValue::of_u32(300));
  return f;
}

// gemma3 (model/arch/gemma3.h): the window of each layer from the pattern (an integer, n_layer
// bools, or the default of 6), the local RoPE base, the soft-cap, the scales, and refusals.
TEST(ModelConfig, Gemma3LayerWindowsAndScales) {
  GgufFile f = base("gemma3");
  f.set("gemma3.block_count", GgufValue::of_u32(7));
  f.set("gemma3.attention.key_length", GgufValue::of_u32(32));
  f.set("gemma3.rope.freq_base", GgufValue::of_f32(1e6f));
  f.set("gemma3.rope.scaling.type", GgufValue::of_string("linear"));
  f.set("gemma3.rope.scaling.factor", GgufValue::of_f32(8.0f));
  f.set("gemma3.attention.sliding_window", GgufValue::of_u32(512));
  auto c = config_from_gguf(f);  // default pattern 6: layer 5 global
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->arch, Arch::kGemma3);
  EXPECT_EQ(c->sliding_window, 0);  // the cache keeps every layer's blocks
  EXPECT_EQ(c->layer_window, (std::vector<int64_t>{512, 512, 512, 512, 512, 0, 512}));
  EXPECT_EQ(c->window_of(5), 0);
  EXPECT_FLOAT_EQ(c->rope.freq_base, 1e6f);
  EXPECT_FLOAT_EQ(c->rope.freq_scale, 0.125f);
  EXPECT_FLOAT_EQ(c->rope_local.freq_base, 10000.0f);  // llama.cpp's default for the sliding layers
  EXPECT_FLOAT_EQ(c->rope_local.freq_scale, 1.0f);
  EXPECT_EQ(c->rope_local.style, kernels::RopeStyle::kNeoxHalves);
  EXPECT_FLOAT_EQ(c->embed_scale, 8.0f);  // sqrt(64)
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-6f);
  EXPECT_TRUE(c->geglu && c->post_norms && c->has_qk_norm);
  EXPECT_EQ(c->final_logit_softcap, 0.0f);

  f.set("gemma3.attention.sliding_window_pattern", GgufValue::of_u32(3));
  f.set("gemma3.rope.freq_base_swa", GgufValue::of_f32(20000.0f));
  f.set("gemma3.final_logit_softcapping", GgufValue::of_f32(30.0f));
  c = config_from_gguf(f);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->layer_window, (std::vector<int64_t>{512, 512, 0, 512, 512, 0, 512}));
  EXPECT_FLOAT_EQ(c->rope_local.freq_base, 20000.0f);
  EXPECT_FLOAT_EQ(c->final_logit_softcap, 30.0f);

  std::vector<uint8_t> bools = {1, 0, 1, 1, 0, 1, 0};
  f.set("gemma3.attention.sliding_window_pattern", GgufValue::numeric_array(GgufType::kBool, bools));
  c = config_from_gguf(f);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->layer_window, (std::vector<int64_t>{512, 0, 512, 512, 0, 512, 0}));

  f.set("gemma3.attention.sliding_window_pattern", GgufValue::of_string("five"));
  EXPECT_NE(config_from_gguf(f).status().message().find("sliding_window_pattern"), std::string::npos);
  f.set("gemma3.attention.sliding_window_pattern", GgufValue::of_u32(6));
  f.set("gemma3.final_logit_softcapping", GgufValue::of_f32(-1.0f));
  EXPECT_NE(config_from_gguf(f).status().message().find("final_logit_softcapping"), std::string::npos);
  f.set("gemma3.final_logit_softcapping", GgufValue::of_f32(30.0f));
  f.set("gemma3.rope.freq_base_swa", GgufValue::of_f32(0.0f));
  EXPECT_NE(config_from_gguf(f).status().message().find("freq_base_swa"), std::string::npos);

  GgufFile global = base("gemma3");  // no window: every layer global
  c = config_from_gguf(global);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(c->layer_window.empty());
  EXPECT_EQ(c->window_of(1), 0);

  GgufFile big = base("gemma3");  // the 62-layer (27B) model scales by n_embd / n_head
  big.set("gemma3.block_count", GgufValue::of_u32(62));
  big.set("gemma3.attention.key_length", GgufValue::of_u32(32));
  c = config_from_gguf(big);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / std::sqrt(16.0f));
}

TEST(ModelConfig, Qwen3WithKeyLength) {
  GgufFile f = base("qwen3");
  f.set("qwen3.attention.key_length", GgufValue::of_u32(32));
  auto c = config_from_gguf(f);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->arch, Arch::kQwen3);
  EXPECT_TRUE(c->has_qk_norm);
  EXPECT_FALSE(c->has_qkv_bias);
  EXPECT_EQ(c->rope.style, kernels::RopeStyle::kNeoxHalves);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->q_dim(), 128);
  EXPECT_EQ(c->rope.rot_dim, 32);
}

TEST(ModelConfig, RopeFreqsTensorBecomesFreqFactors) {
  GgufFile f = base("llama");
  const std::vector<float> divisors = {1, 1, 2.5f, 8, 8, 8, 8, 8};  // head_dim 16: 8 pairs
  ASSERT_TRUE(f.add_tensor("rope_freqs.weight", {8}, kGgmlTypeF32, divisors.data(), 32).is_ok());
  auto c = config_from_gguf(f);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->rope.freq_factors, divisors);
  EXPECT_NEAR(kernels::rope_inv_freq(c->rope, 2), std::pow(10000.0, -4.0 / 16) / 2.5, 1e-12);

  GgufFile wrong = base("llama");
  ASSERT_TRUE(wrong.add_tensor("rope_freqs.weight", {4}, kGgmlTypeF32, divisors.data(), 16).is_ok());
  auto bad = config_from_gguf(wrong);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("rope_freqs.weight"), std::string::npos) << bad.status().message();

  GgufFile zero = base("llama");
  const std::vector<float> zeros(8, 0.0f);
  ASSERT_TRUE(zero.add_tensor("rope_freqs.weight", {8}, kGgmlTypeF32, zeros.data(), 32).is_ok());
  EXPECT_FALSE(config_from_gguf(zero).is_ok());
}

TEST(ModelConfig, Errors) {
  struct Case {
    const char* label;
    std::string key;
    GgufValue value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"unknown arch", "general.architecture", GgufValue::of_string("gpt2"), "unsupported architecture 'gpt2'"},
      {"odd key length", "llama.attention.key_length", GgufValue::of_u32(15), "bad head dimension 15"},
      {"kv heads", "llama.attention.head_count_kv", GgufValue::of_u32(3), "not a multiple"},
      {"rot dim", "llama.rope.dimension_count", GgufValue::of_u32(18), "bad rope.dimension_count"},
      {"width", "llama.embedding_length", GgufValue::of_u32(66), "not a multiple of head_count"},
      {"freq base", "llama.rope.freq_base", GgufValue::of_f32(-1.0f), "bad rope frequency base"},
      {"eps", "llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(0.0f), "epsilon"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    GgufFile f = base("llama");
    f.set(c.key, c.value);
    auto r = config_from_gguf(f);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace pagoda::model
