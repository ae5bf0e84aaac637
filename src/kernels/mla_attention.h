// Multi-head Latent Attention (DeepSeek-V2/V3) over a K-only paged cache, in the absorbed form.
//
// Each layer caches one latent row per token: [c_kv (kv_lora_rank) | k_pe (rope dim)], one
// "kv head" of head_dim = kv_lora_rank + rope dim (KvLayerView::k_only; any KV dtype, ND or NZ,
// the block layouts of kernels/attention.h). The model has projected each query head into
// latent space beforehand:  q_abs[h] = [W_UK[h]^T q_nope[h] | rope(q_pe[h])]   [kv_lora_rank + rope]
// so that q_abs[h] . latent_t = q_nope[h] . (W_UK[h] c_t) + q_pe[h] . k_pe_t, the score of the
// decompressed key. Values are the latent's first v_dim = kv_lora_rank channels; the model
// up-projects the result per head afterwards (o[h] = W_UV[h] out[h]):
//   out[t, h, :] = sum_p softmax_p(scale * q_abs[t, h] . latent_p) * latent_p[0 : v_dim]
// The mask (window, sinks), the block walk and the row decoding are those of paged_attention.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace pagoda::kernels {

// q: [n_tokens, params.n_head, layer.head_dim]; out: [n_tokens, params.n_head, v_dim] with
// v_dim <= layer.head_dim. layer.n_kv_head == 1. Other preconditions: paged_attention's.
void mla_attention(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan* seqs,
                   int64_t n_seqs, const AttentionParams& params, int64_t v_dim, float* out, ThreadPool& pool,
                   AttentionScratch& scratch, Isa isa = detect_isa());

// Reference: plain loops in double over rows read by kv_load_row_reference. Same contract.
void mla_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                             const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, int64_t v_dim,
                             float* out);

}  // namespace pagoda::kernels
