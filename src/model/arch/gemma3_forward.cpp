// ForwardPass::forward_gemma3: Gemma 3's layer (arch/gemma3.h) over the paged cache, with the
// scratch of model/llama_model.h's ForwardPass. Every layer owns its K/V; a sliding layer masks
// positions outside its window (the cache still holds them for the global layers).
#include <cmath>

#include "kernels/ops.h"
#include "model/llama_model.h"

namespace pagoda::model {

void ForwardPass::forward_gemma3(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits) {
  const ModelConfig& c = model_.config();
  const int64_t T = batch.n_tokens();
  const int64_t d = c.n_embd, ff = c.n_ff;
  CHECK(T > 0 && T <= max_tokens_) << "batch of " << T << " tokens, max " << max_tokens_;
  CHECK_EQ(static_cast<int64_t>(batch.positions.size()), T);
  CHECK_EQ(static_cast<int64_t>(batch.slot_mapping.size()), T);
  CHECK_EQ(static_cast<int64_t>(kv_layers.size()), c.n_layer);
  CHECK(batch.rope_positions.empty() || static_cast<int64_t>(batch.rope_positions.size()) == T);
  const int32_t* rope_positions = batch.rope_positions.empty() ? batch.positions.data() : batch.rope_positions.data();
  float* x = x_.data();    // [T, d] residual stream
  float* xb = xb_.data();  // [T, d]

  embed(batch);
  if (c.embed_scale > 0) {
    for (int64_t i = 0; i < T * d; ++i) x[i] *= c.embed_scale;
  }
  const float scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = model_.layer(l);
    const bool local = c.window_of(l) > 0;
    const kernels::RopeParams& rope = local ? c.rope_local : c.rope;
    // Attention: q, k, v [T, heads, head_dim]; per-head norms, then RoPE.
    kernels::rmsnorm(x, w.attn_norm.data(), xb, T, d, c.rms_eps);
    matmul_.run(w.wq, xb, T, q_.data());
    matmul_.run(w.wk, xb, T, k_.data());
    matmul_.run(w.wv, xb, T, v_.data());
    kernels::rmsnorm(q_.data(), w.q_norm.data(), q_.data(), T * c.n_head, c.head_dim, c.rms_eps);
    kernels::rmsnorm(k_.data(), w.k_norm.data(), k_.data(), T * c.n_kv_head, c.head_dim, c.rms_eps);
    kernels::rope(q_.data(), rope_positions, T, c.n_head, rope);
    kernels::rope(k_.data(), rope_positions, T, c.n_kv_head, rope);
    kernels::store_kv(kv_layers[l], k_.data(), v_.data(), batch.slots_of(l).data(), T, isa_);
    const kernels::AttentionParams attn = layer_attention(l, scale);
    kernels::paged_attention(kv_layers[l], q_.data(), batch.positions.data(), batch.seqs_of(l).data(),
                             static_cast<int64_t>(batch.seqs.size()), attn, att_.data(), pool_, attention_scratch_,
                             isa_);
    if (batch.scores != nullptr) {
      kernels::AttentionScores scores;  // this layer's slices of batch.scores
      scores.data = batch.scores + l * c.n_kv_head * batch.score_stride;
      scores.seq_stride = c.n_layer * c.n_kv_head * batch.score_stride;
      scores.head_stride = batch.score_stride;
      scores.observe_from = batch.observe_from;
      kernels::paged_attention_scores(kv_layers[l], q_.data(), batch.positions.data(), batch.seqs_of(l).data(),
                                      static_cast<int64_t>(batch.seqs.size()), attn, scores, pool_,
                                      attention_scratch_, isa_);
    }
    matmul_.run(w.wo, att_.data(), T, xb);
    kernels::rmsnorm(xb, w.attn_post_norm.data(), xb, T, d, c.rms_eps);
    kernels::add_inplace(x, xb, T * d);
    // FFN (GeGLU), normed before and after.
    kernels::rmsnorm(x, w.ffn_norm.data(), xb, T, d, c.rms_eps);
    matmul_.run(w.w_gate, xb, T, gate_.data());
    matmul_.run(w.w_up, xb, T, up_.data());
    pool_.parallel_for(T * ff, [&](int64_t b, int64_t e, int) {
      kernels::gelu_mul(gate_.data() + b, up_.data() + b, e - b, isa_);
    }, 1024);
    matmul_.run(w.w_down, gate_.data(), T, xb);
    kernels::rmsnorm(xb, w.ffn_post_norm.data(), xb, T, d, c.rms_eps);
    kernels::add_inplace(x, xb, T * d);
  }
  classify(batch, logits);
}

}  // namespace pagoda::model
