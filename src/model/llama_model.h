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
#include "kernels/mla_attention.h"
#include "model/batch.h"
#include "model/format/gguf.h"
#include "model/format/hf_checkpoint.h"
#include "model/model_config.h"
#include "model/format/tensor_table.h"

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
  std::vector<float> q_norm, k_norm;  // [head_dim] each (qwen3, gemma3), else empty
  std::vector<float> attn_post_norm, ffn_post_norm;  // [n_embd] each (gemma3), else empty
  // MLA (deepseek2; wk, wv unused). r = kv_lora_rank, dn/dr = qk_nope/rope dims, dv = v_head_dim.
  kernels::WeightView wq_a;           // [q_lora_rank, n_embd] (q LoRA; wq is then [q_dim, q_lora_rank])
  std::vector<float> q_a_norm;        // [q_lora_rank]
  kernels::WeightView wkv_a;          // [r + dr, n_embd]: latent c_kv then the rope key k_pe
  std::vector<float> kv_a_norm;       // [r]
  std::vector<float> wk_b;            // [n_head, r, dn] f32: q_nope -> latent (absorbed W_UK^T)
  std::vector<float> wv_b;            // [n_head, dv, r] f32: latent -> value (W_UV)
  // Mixture of experts (model/moe.h; a MoE layer has w_gate_exp, and w_gate, w_up, w_down
  // unused). shexp: the shared experts, n_ff_sh = n_ff_exp * n_expert_shared (else unbound).
  kernels::WeightView w_router;                  // [n_expert, n_embd] (ffn_gate_inp)
  std::vector<float> expert_bias;                // [n_expert] selection bias (exp_probs_b), or empty
  std::vector<kernels::WeightView> w_gate_exp;   // [n_expert] of [n_ff_exp, n_embd]
  std::vector<kernels::WeightView> w_up_exp;     // [n_expert] of [n_ff_exp, n_embd]
  std::vector<kernels::WeightView> w_down_exp;   // [n_expert] of [n_embd, n_ff_exp]
  kernels::WeightView w_gate_shexp, w_up_shexp;  // [n_ff_sh, n_embd]
  kernels::WeightView w_down_shexp;              // [n_embd, n_ff_sh]
  bool is_moe() const { return !w_gate_exp.empty(); }
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
  // Bytes of all tensors: what a dense model reads per token (the decode floor); a MoE model's
  // every expert, of which a token reads n_expert_used.
  int64_t weight_bytes() const;
  // Rounds every F16 weight matrix (token embeddings and output included, a tied one once) to
  // BF16 in place, nearest even: the values the bf16 GEMM multiplies F16 weights at
  // (kernels/matmul_bf16.h), so its results do not change, it reads the rows without
  // converting them, and the f32 decode kernels then read the rounded weights. For
  // EngineConfig::batched_bf16. Needs weights in memory this model owns (a GGUF file); a
  // Hugging Face folder's F16 tensors are mapped read-only and give an error.
  Status round_f16_weights_to_bf16();

 private:
  LlamaModel(GgufFile file, ModelConfig config) : file_(std::move(file)), config_(std::move(config)) {}
  Status bind(const TensorTable& tensors);
  Status bind_mla(const TensorTable& tensors);  // deepseek2 (deepseek2_model.cpp)
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
// How MLA prefill chunks attend (ForwardPass::set_mla_prefill).
enum class MlaPrefill { kAuto, kAbsorbed, kExpanded, kRowWalk };

class ForwardPass {
 public:
  ForwardPass(const LlamaModel& model, ThreadPool& pool, int64_t max_tokens, int64_t max_context,
              kernels::Isa isa = kernels::detect_isa());

  // kv_layers: [n_layer] views of the paged cache. logits: [batch.logit_rows.size(), n_vocab].
  // MLA models (deepseek2): kv_layers are K-only latent views, n_kv_head 1, head_dim
  // kv_lora_rank + qk_rope_dim (ModelConfig::kv_cache_head_dim).
  void forward(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_context() const { return max_context_; }
  // Mixture of experts: [n_layer, n_expert] the tokens routed to each expert of each layer by
  // every forward pass so far (a token counts once per expert it runs; dense layers' rows stay
  // 0). Empty for a dense model. Read it on the thread that runs forward().
  std::span<const int64_t> expert_tokens() const { return expert_tokens_; }
  // Batched decode steps (16+ rows) of F16/BF16 weights through the bf16 GEMM
  // (kernels::Matmul::set_batched_bf16): faster, but a row's numbers depend on its batch.
  void set_batched_bf16(bool on) { matmul_.set_batched_bf16(on); }
  // F16/BF16 weights in f32 arithmetic on every path (kernels::Matmul::set_f32_precision).
  void set_f32_precision(bool on) { matmul_.set_f32_precision(on); }
  // Attention mask of every layer (kernels::AttentionParams): starts as the model's
  // sliding_window without sinks; the engine's StreamingLLM mode sets its own window + sinks.
  // MLA prefill: a sequence with at least kernels::kMlaGemmMinRows rows in a batch runs its
  // attention as tiled GEMMs, in the expanded form (kernels::mla_attention_expanded: keys and
  // values decompressed per chunk, no query absorption or up-projection) where that costs fewer
  // multiply-adds (kernels::mla_expanded_pays), else in the absorbed form
  // (kernels::mla_attention_gemm); fewer rows take the absorbed row walk. `form` forces one of
  // the GEMM forms (A/B, tests); kRowWalk keeps every row on the row walk.
  void set_mla_prefill(MlaPrefill form) { mla_prefill_ = form; }
  void set_attention_mask(int64_t window, int64_t n_sinks) {
    window_ = window;
    n_sinks_ = n_sinks;
  }

 private:
  void embed(const Batch& batch);                       // x_ = embeddings of the batch's tokens
  // x_ += SwiGLU(rmsnorm(x_)), or layer l's experts' (model/moe.h, moe.cpp).
  void feed_forward(const LayerWeights& w, int64_t l, int64_t T);
  void feed_forward_moe(const LayerWeights& w, int64_t l, int64_t T);
  void classify(const Batch& batch, float* logits);     // logits of batch.logit_rows
  // deepseek2 (deepseek2_model.cpp): MLA attention in the absorbed form, then the dense FFN.
  void forward_mla(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits);
  // Chooses each sequence's form (mla_expanded_, absorbed_rows_); returns the absorbed rows.
  int64_t plan_mla_forms(const Batch& batch);
  void mla_attend(const kernels::KvLayerView& layer, std::span<const kernels::SeqSpan> seqs,
                  const kernels::AttentionParams& attn, const int32_t* positions);
  // gemma3 (arch/gemma3_forward.cpp; the arithmetic in arch/gemma3.h).
  void forward_gemma3(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits);
  // The mask of layer l: its own window (no sinks) where it has one narrower than the
  // engine's, else the engine's window and sinks.
  kernels::AttentionParams layer_attention(int64_t l, float scale) const;

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
  // MLA only (empty otherwise); L = kv_lora_rank + qk_rope_dim. att_ is then
  // [max_tokens, max(q_dim, n_head * v_head_dim)].
  kernels::RopeParams latent_rope_;  // MLA: the model's RoPE over a latent row's last qk_rope_dim values
  std::vector<float> q_a_;         // [max_tokens, q_lora_rank]
  std::vector<float> kv_a_;        // [max_tokens, L] latent rows: rmsnorm(c_kv) | rope(k_pe)
  std::vector<float> q_abs_;       // [max_tokens, n_head, L] queries in latent space
  std::vector<float> att_latent_;  // [max_tokens, n_head, kv_lora_rank] attention output, latent
  std::vector<float> head_in_;     // [max_tokens, max(dn, r)] one head's rows, gathered
  std::vector<float> head_out_;    // [max_tokens, max(r, dv)]
  std::unique_ptr<kernels::MlaGemmScratch> mla_gemm_;   // its tiles and accumulators
  MlaPrefill mla_prefill_ = MlaPrefill::kAuto;
  std::vector<kernels::SeqSpan> mla_seq_;               // [max_tokens] a run of row-walk sequences, rebased
  std::vector<uint8_t> mla_expanded_;                   // [max_tokens] per batch sequence: expanded form
  std::vector<int64_t> absorbed_rows_;                  // [max_tokens] rows of absorbed-form sequences
  // MoE only (empty otherwise); k = n_expert_used. gate_ and up_ are then [max_tokens,
  // max(n_ff, n_ff_exp, n_ff_exp * n_expert_shared)].
  std::vector<float> router_;          // [max_tokens, n_expert] router logits
  std::vector<double> route_scratch_;  // [3 * n_expert] (route_tokens)
  std::vector<int32_t> route_ids_;     // [max_tokens, k] selected experts
  std::vector<float> route_weights_;   // [max_tokens, k] their weights
  std::vector<int64_t> expert_begin_;  // [n_expert + 1] first row of each expert
  std::vector<int64_t> expert_tokens_; // [n_layer, n_expert] tokens routed so far (expert_tokens())
  std::vector<int64_t> expert_fill_;   // [n_expert] counting-sort cursors
  std::vector<int32_t> expert_rows_;   // [max_tokens * k] (token * k + slot) by expert
  std::vector<float> moe_in_;          // [max_tokens, n_embd] one expert's gathered rows
  std::vector<float> moe_out_;         // [max_tokens, n_embd] its outputs
  std::vector<float> moe_acc_;         // [max_tokens, n_embd] the weighted sum
};

// Widest input / output of any matmul of the model (sizes the Matmul scratch).
int64_t max_matmul_in(const ModelConfig& c);
int64_t max_matmul_out(const ModelConfig& c);

}  // namespace pagoda::model
