// config.json -> ModelConfig: the four architectures, head_dim, rope scaling (Llama 3
// inverse frequencies against the formula computed here), sliding windows and bad configs.
#include "model/format/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "kernels/ops.h"

namespace pagoda::model {
namespace {

nlohmann::json llama_json() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 256},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 2},
          {"intermediate_size", 512},
          {"vocab_size", 1000},
          {"max_position_embeddings", 4096},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"hidden_act", "silu"},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", false}};
}

Result<HfConfig> parse(const nlohmann::json& j) { return config_from_hf_json(j.dump(), "config.json"); }

TEST(HfConfig, LlamaHyperparameters) {
  auto c = parse(llama_json());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const ModelConfig& m = c->model;
  EXPECT_EQ(m.arch, Arch::kLlama);
  EXPECT_EQ(m.arch_name, "llama");
  EXPECT_EQ(m.n_embd, 256);
  EXPECT_EQ(m.n_layer, 4);
  EXPECT_EQ(m.n_head, 8);
  EXPECT_EQ(m.n_kv_head, 2);
  EXPECT_EQ(m.head_dim, 32);
  EXPECT_EQ(m.n_ff, 512);
  EXPECT_EQ(m.n_vocab, 1000);
  EXPECT_EQ(m.n_ctx_train, 4096);
  EXPECT_FLOAT_EQ(m.rms_eps, 1e-5f);
  EXPECT_EQ(m.rope.style, kernels::RopeStyle::kNeoxHalves);  // HF rotate_half
  EXPECT_EQ(m.rope.rot_dim, 32);
  EXPECT_FLOAT_EQ(m.rope.freq_base, 500000.0f);
  EXPECT_FLOAT_EQ(m.rope.freq_scale, 1.0f);
  EXPECT_TRUE(m.rope.freq_factors.empty());
  EXPECT_FALSE(m.has_qkv_bias);
  EXPECT_FALSE(m.has_qk_norm);
  EXPECT_EQ(m.sliding_window, 0);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(HfConfig, ArchitecturesAndTheirFlags) {
  auto j = llama_json();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["sliding_window"] = 4096;  // ignored: use_sliding_window is false
  j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = true;
  auto q2 = parse(j);
  ASSERT_TRUE(q2.is_ok()) << q2.status().message();
  EXPECT_EQ(q2->model.arch, Arch::kQwen2);
  EXPECT_TRUE(q2->model.has_qkv_bias);
  EXPECT_EQ(q2->model.sliding_window, 0);
  EXPECT_TRUE(q2->tie_word_embeddings);

  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 64;  // not hidden_size / heads
  auto q3 = parse(j);
  ASSERT_TRUE(q3.is_ok()) << q3.status().message();
  EXPECT_EQ(q3->model.arch, Arch::kQwen3);
  EXPECT_TRUE(q3->model.has_qk_norm);
  EXPECT_FALSE(q3->model.has_qkv_bias);
  EXPECT_EQ(q3->model.head_dim, 64);
  EXPECT_EQ(q3->model.q_dim(), 512);
  EXPECT_EQ(q3->model.rope.head_dim, 64);

  j["use_sliding_window"] = true;
  EXPECT_FALSE(parse(j).is_ok());

  auto m = llama_json();
  m["architectures"] = {"MistralForCausalLM"};
  m["sliding_window"] = 4096;
  auto mistral = parse(m);
  ASSERT_TRUE(mistral.is_ok()) << mistral.status().message();
  EXPECT_EQ(mistral->model.arch, Arch::kLlama);
  EXPECT_EQ(mistral->model.sliding_window, 4096);
  m["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  EXPECT_EQ(parse(m)->model.sliding_window, 0);

  auto b = llama_json();
  b["head_dim"] = nullptr;  // null: derived
  EXPECT_EQ(parse(b)->model.head_dim, 32);
  b.erase("num_key_value_heads");
  EXPECT_EQ(parse(b)->model.n_kv_head, 8);
}

TEST(HfConfig, LinearRopeScalingScalesPositions) {
  auto j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto c = parse(j);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_FLOAT_EQ(c->model.rope.freq_scale, 0.25f);
  for (int64_t i : {0, 5, 15}) {
    EXPECT_NEAR(kernels::rope_inv_freq(c->model.rope, i), std::pow(500000.0, -2.0 * i / 32) / 4, 1e-12);
  }
}

// The Llama 3.1 rule written out from its definition: wavelengths shorter than
// original / high_freq_factor keep their frequency, longer than original / low_freq_factor
// are divided by factor, and in between the frequency is interpolated linearly in
// original / wavelength.
double llama3_inv_freq(double base, int64_t dim, int64_t i, double factor, double low, double high, double original) {
  const double f = std::pow(base, -2.0 * i / dim);
  const double wavelen = 2 * std::numbers::pi / f;
  if (wavelen < original / high) return f;
  if (wavelen > original / low) return f / factor;
  const double t = (original / wavelen - low) / (high - low);
  return t * f + (1 - t) * f / factor;
}

TEST(HfConfig, Llama3RopeScalingInverseFrequencies) {
  auto j = llama_json();
  j["hidden_size"] = 1024;  // head_dim 128, as Llama 3.1
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto c = parse(j);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const kernels::RopeParams& r = c->model.rope;
  ASSERT_EQ(r.freq_factors.size(), 64u);
  int kept = 0, scaled = 0, blended = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double want = llama3_inv_freq(500000.0, 128, i, 8.0, 1.0, 4.0, 8192);
    EXPECT_NEAR(kernels::rope_inv_freq(r, i) / want, 1.0, 1e-6) << "pair " << i;
    const double plain = std::pow(500000.0, -2.0 * i / 128);
    if (std::fabs(want - plain) < 1e-15) ++kept;
    else if (std::fabs(want - plain / 8) < 1e-15) ++scaled;
    else ++blended;
  }
  // All three regimes occur for these parameters.
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(blended, 0);
  // Known values: pair 0 (wavelength 2 pi) kept; the last pair fully scaled.
  EXPECT_FLOAT_EQ(r.freq_factors[0], 1.0f);
  EXPECT_FLOAT_EQ(r.freq_factors[63], 8.0f);
}

TEST(HfConfig, BadConfigsGiveErrors) {
  struct Case {
    const char* label;
    nlohmann::json patch;  // merged into llama_json()
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"unknown architecture", {{"architectures", {"GPT2LMHeadModel"}}}, "unsupported architecture 'GPT2LMHeadModel'"},
      {"no architectures", {{"architectures", nlohmann::json::array()}}, "missing 'architectures'"},
      {"no hidden_size", {{"hidden_size", nullptr}}, "missing 'hidden_size'"},
      {"string layers", {{"num_hidden_layers", "4"}}, "'num_hidden_layers' is not an integer"},
      {"zero heads", {{"num_attention_heads", 0}}, "num_attention_heads must be positive"},
      {"kv heads not dividing", {{"num_key_value_heads", 3}}, "not a multiple of head_count_kv"},
      {"odd head_dim", {{"head_dim", 33}}, "bad head_dim"},
      {"width not multiple", {{"hidden_size", 100}}, "hidden_size is not a multiple"},
      {"gelu", {{"hidden_act", "gelu"}}, "unsupported hidden_act"},
      {"mlp bias", {{"mlp_bias", true}}, "mlp_bias"},
      {"attention bias", {{"attention_bias", true}}, "attention_bias"},
      {"yarn", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, "unsupported rope_scaling type 'yarn'"},
      {"no factor", {{"rope_scaling", {{"type", "linear"}}}}, "missing 'factor'"},
      {"negative factor", {{"rope_scaling", {{"type", "linear"}, {"factor", -2.0}}}}, "factor must be positive"},
      {"llama3 without fields", {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "missing 'low_freq_factor'"},
      {"llama3 low >= high", {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                                                {"high_freq_factor", 1.0}, {"original_max_position_embeddings", 8192}}}},
       "bad llama3 rope_scaling"},
      {"negative window", {{"sliding_window", -5}}, "negative sliding_window"},
      {"huge vocab", {{"vocab_size", int64_t{1} << 40}}, "vocabulary"},
      {"zero eps", {{"rms_norm_eps", 0}}, "epsilon"},
      {"partial rotary odd", {{"partial_rotary_factor", 0.1}}, "partial_rotary_factor"},
      {"tie not bool", {{"tie_word_embeddings", "yes"}}, "not true or false"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    auto j = llama_json();
    j.update(c.patch);
    auto r = parse(j);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  EXPECT_NE(config_from_hf_json("{not json", "c.json").status().message().find("c.json: not valid JSON"), std::string::npos);
  EXPECT_FALSE(config_from_hf_json("[]", "c.json").is_ok());
}

TEST(HfConfig, PartialRotaryFactor) {
  auto j = llama_json();
  j["partial_rotary_factor"] = 0.5;
  auto c = parse(j);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->model.rope.rot_dim, 16);
}

}  // namespace
}  // namespace pagoda::model
