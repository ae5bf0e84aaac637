// ModelConfig: the hyperparameters of a decoder-only transformer, read from GGUF metadata
// ("{arch}.embedding_length" etc.) or a Hugging Face config.json (model/hf_config.h) and
// validated once (validate_config).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"

namespace pagoda::model {

class GgufFile;

enum class Arch { kLlama, kQwen2, kQwen3 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;     // "llama", "qwen2", "qwen3"
  std::string name;          // general.name, if any
  int64_t n_embd = 0;        // model width
  int64_t n_layer = 0;
  int64_t n_head = 0;        // query heads
  int64_t n_kv_head = 0;     // K/V heads (GQA when < n_head, MQA when 1)
  int64_t head_dim = 0;
  int64_t n_ff = 0;          // SwiGLU hidden width
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;   // context length the model was trained with
  float rms_eps = 1e-5f;
  kernels::RopeParams rope;  // style, head_dim, rot_dim, freq_base, freq_scale
  bool has_qkv_bias = false;
  bool has_qk_norm = false;  // qwen3: RMSNorm over each q and k head (weights [head_dim]) before RoPE
  // {arch}.attention.sliding_window; 0 if absent. > 0: every layer attends only to the last
  // sliding_window positions (position p sees t with p - t < sliding_window).
  int64_t sliding_window = 0;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  // 2 x n_layer x n_kv_head x head_dim x elem_bytes
  int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * n_layer * kv_dim() * elem_bytes; }
};

// Reads and validates the hyperparameters; the error names the missing or bad key.
// A tensor rope_freqs.weight ([rot_dim / 2] f32) becomes rope.freq_factors.
Result<ModelConfig> config_from_gguf(const GgufFile& file);

// Checks counts, head geometry and RoPE of a filled config (both readers end with it).
Status validate_config(const ModelConfig& config);

// Llama 3 rope scaling ("rope_type": "llama3") as per-pair frequency divisors [rot_dim / 2]
// for RopeParams::freq_factors. With wavelength w_i = 2 pi / (base^(-2i / rot_dim)),
// low = original_context / low_freq_factor and high = original_context / high_freq_factor:
// w_i < high: 1 (kept); w_i > low: factor; otherwise the inverse frequency is blended,
// (1 - s) / factor + s with s = (original_context / w_i - low_freq_factor) /
// (high_freq_factor - low_freq_factor), and the divisor is its reciprocal.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192;
};
Result<std::vector<float>> llama3_freq_factors(const Llama3RopeScaling& scaling, double freq_base, int64_t rot_dim);

}  // namespace pagoda::model
