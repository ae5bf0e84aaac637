// ModelConfig: the hyperparameters of a decoder-only transformer, read from GGUF metadata
// ("{arch}.embedding_length" etc.) and validated once.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/ops.h"

namespace pagoda::model {

class GgufFile;

enum class Arch { kLlama, kQwen2 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;     // "llama", "qwen2"
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
  // {arch}.attention.sliding_window; 0 if absent. > 0: every layer attends only to the last
  // sliding_window positions (position p sees t with p - t < sliding_window).
  int64_t sliding_window = 0;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  // 2 x n_layer x n_kv_head x head_dim x elem_bytes
  int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * n_layer * kv_dim() * elem_bytes; }
};

// Reads and validates the hyperparameters; the error names the missing or bad key.
Result<ModelConfig> config_from_gguf(const GgufFile& file);

}  // namespace pagoda::model
