// A Hugging Face config.json -> ModelConfig, for the architectures Pagoda runs:
//
//   LlamaForCausalLM, MistralForCausalLM   llama  (Mistral: sliding_window)
//   Qwen2ForCausalLM                       qwen2  (q/k/v bias)
//   Qwen3ForCausalLM                       qwen3  (q/k RMSNorm per head)
//   Gemma3ForCausalLM                      gemma3 (GeGLU, four norms, sliding layers: the keys
//                                          at read_gemma3_hf in hf_config.cpp)
//   Qwen3MoeForCausalLM                    qwen3moe (experts: the keys at read_moe_hf)
//
// All of them apply RoPE with rotate_half, i.e. pairs (i, i + rot/2): RopeStyle::kNeoxHalves
// (GGUF llama files instead hold Q/K rows permuted for adjacent pairs; HF weights are used as
// they are). Keys read: hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim (when present and not null), intermediate_size, vocab_size,
// max_position_embeddings, rms_norm_eps, rope_theta, partial_rotary_factor, rope_scaling
// (null, "default", "linear": factor, "llama3": factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings), tie_word_embeddings, sliding_window (null: none),
// attention_bias and mlp_bias (must be false: those biases include o_proj / down_proj, which
// the forward pass has not), hidden_act (must be silu; Gemma: hidden_activation gelu_pytorch_tanh).
#pragma once

#include <string>

#include "core/status.h"
#include "model/model_config.h"

namespace pagoda::model {

struct HfConfig {
  ModelConfig model;
  std::string architecture;          // "LlamaForCausalLM", ...
  bool tie_word_embeddings = false;  // true: no lm_head.weight, the classifier is embed_tokens
};

// `json_text` is config.json's contents; `name` (its path) prefixes every error.
Result<HfConfig> config_from_hf_json(const std::string& json_text, const std::string& name);

}  // namespace pagoda::model
