// LlamaModel: the weights of a Llama-family decoder (llama, qwen2, qwen3) bound from a
// GgufFile or a Hugging Face folder (HfCheckpoint) it owns, and ForwardPass: the scratch and
// the forward pass over a paged KV cache.
//
//   x = embed(tokens)                                              [T, n_embd]
//   per layer: h = rmsnorm(x); q,k,v = h Wq, h Wk, h Wv (+ bias)
//              (qwen3: q, k = rmsnorm of each head); rope(q, k)
//              store k, v at the batch's slots; a = paged_attention(q); x += a Wo
//              h = rmsnorm(x); x += (silu(h Wgate) * (h Wup)) Wdown
//   logits = rmsnorm(x[logit_rows]) Woutput                         [R, n_vocab]
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "model/batch.h"
#include "model/gguf.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace pagoda::model {

struct LayerWeights {
  std::vector<float> attn_norm;   // [n_embd]
  std::vector<float> ffn_norm;    // [n_embd]
  kernels::WeightView wq;         // [q_dim, n_embd]
  kernels::WeightView wk;         // [kv_dim, n_embd]
  kernels::WeightView wv;         // [kv_dim, n_embd]
  kernels::WeightView wo;         // [n_embd, q_dim]
  kernels::WeightView w_gate;     // [n_ff, n_embd]
  kernels::WeightView w_up;       // [n_ff, n_embd]
  kernels::WeightView w_down;     // [n_embd, n_ff]
  std::vector<float> bq, bk, bv;  // [q_dim], [kv_dim], [kv_dim] (qwen2), else empty
  std::vector<float> q_norm, k_norm;  // [head_dim] each (qwen3), else empty
};

class LlamaModel {
 public:
  // Takes ownership of the file (its tensor memory backs the weights).
  static Result<std::unique_ptr<LlamaModel>> load(GgufFile file);
  // Takes ownership of the folder's mapped safetensors (weights are used in place).
  static Result<std::unique_ptr<LlamaModel>> load(HfCheckpoint checkpoint);

  const ModelConfig& config() const { return config_; }
  // The GGUF file; for a Hugging Face folder, its config as GGUF metadata and no tensors
  // (HfCheckpoint::metadata()).
  const GgufFile& file() const { return file_; }
  const kernels::WeightView& token_embedding() const { return token_embd_; }  // [n_vocab, n_embd]
  const kernels::WeightView& output() const { return output_; }               // [n_vocab, n_embd]
  const std::vector<float>& output_norm() const { return output_norm_; }
  const LayerWeights& layer(int64_t l) const { return layers_[l]; }
  int64_t weight_bytes() const;  // bytes of all tensors read per token (the decode floor)

 private:
  LlamaModel(GgufFile file, ModelConfig config) : file_(std::move(file)), config_(std::move(config)) {}
  Status bind(const TensorTable& tensors);
  GgufFile file_;
  std::unique_ptr<HfCheckpoint> checkpoint_;  // set when loaded from a Hugging Face folder
  ModelConfig config_;
  kernels::WeightView token_embd_;
  kernels::WeightView output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
};

// Scratch buffers and kernels state for forward passes of up to max_tokens rows over
// contexts of up to max_context positions. Allocated once; forward() never allocates.
class ForwardPass {
 public:
  ForwardPass(const LlamaModel& model, ThreadPool& pool, int64_t max_tokens, int64_t max_context,
              kernels::Isa isa = kernels::detect_isa());

  // kv_layers: [n_layer] views of the paged cache. logits: [batch.logit_rows.size(), n_vocab].
  void forward(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_context() const { return max_context_; }
  // Attention mask of every layer (kernels::AttentionParams): starts as the model's
  // sliding_window without sinks; the engine's StreamingLLM mode sets its own window + sinks.
  void set_attention_mask(int64_t window, int64_t n_sinks) {
    window_ = window;
    n_sinks_ = n_sinks;
  }

 private:
  const LlamaModel& model_;
  ThreadPool& pool_;
  int64_t max_tokens_;
  int64_t max_context_;
  kernels::Matmul matmul_;
  kernels::AttentionScratch attention_scratch_;
  kernels::Isa isa_;
  int64_t window_ = 0;   // 0: unlimited
  int64_t n_sinks_ = 0;
  std::vector<float> x_;      // [max_tokens, n_embd] residual stream
  std::vector<float> xb_;     // [max_tokens, n_embd] normed input / projection output
  std::vector<float> q_;      // [max_tokens, q_dim]
  std::vector<float> k_;      // [max_tokens, kv_dim]
  std::vector<float> v_;      // [max_tokens, kv_dim]
  std::vector<float> att_;    // [max_tokens, q_dim]
  std::vector<float> gate_;   // [max_tokens, n_ff]
  std::vector<float> up_;     // [max_tokens, n_ff]
};

}  // namespace pagoda::model
