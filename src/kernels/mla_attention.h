// Multi-head Latent Attention (DeepSeek-V2/V3) over a K-only paged cache: the absorbed form
// (decode, short chunks) and, for prefill, the expanded form (mla_attention_expanded).
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

#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace pagoda::kernels {

// q: [n_tokens, params.n_head, layer.head_dim]; out: [n_tokens, params.n_head, v_dim] with
// v_dim <= layer.head_dim. layer.n_kv_head == 1. Other preconditions: paged_attention's.
void mla_attention(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan* seqs,
                   int64_t n_seqs, const AttentionParams& params, int64_t v_dim, float* out, ThreadPool& pool,
                   AttentionScratch& scratch, Isa isa = detect_isa());

// A prefill chunk of one sequence as GEMMs, flash-attention style. The latent rows are decoded
// to f32 once per chunk of up to kMlaChunk positions; then for each (head, block of up to
// kMlaRowBlock rows), on its own thread:
//   S = scale * q[rows, h] . chunk^T           (sgemm [rows, L] x [L, n]; columns past the
//                                               block's last position are skipped)
//   online softmax: m, l per (row, head); out[rows, h] *= exp(m_old - m_new); P = exp(S - m)
//   out[rows, h] += P . chunk[:, :v_dim]       (sgemm [rows, n] x [n, v_dim])
// and finally out /= l. The output buffer is the accumulator (no per-head copies); the
// arithmetic is the absorbed form's, so the result equals mla_attention's to float rounding,
// at GEMM speed instead of one dot product per (row, head, position). For sequences with
// kMlaGemmMinRows rows or more in the batch and no window (params.window == 0); contract
// otherwise mla_attention's, for the rows of `seq`.
inline constexpr int64_t kMlaChunk = 2048;
inline constexpr int64_t kMlaRowBlock = 64;
inline constexpr int64_t kMlaGemmMinRows = 16;

// The per-head up-projections of a layer, f32 (the model's W_UK and W_UV):
//   wk_b: [n_head, kv_lora_rank, nope_dim]   k_nope[h] = c . wk_b[h]    (W_UK[h]^T)
//   wv_b: [n_head, v_dim, kv_lora_rank]      v[h]      = c . wv_b[h]^T  (W_UV[h])
struct MlaUpProjection {
  const float* wk_b = nullptr;
  const float* wv_b = nullptr;
  int64_t kv_lora_rank = 0, nope_dim = 0, v_dim = 0;
};

class MlaGemmScratch {
 public:
  // Up to max_rows rows and n_head heads per call, latent rows of head_dim values, chunks of
  // `chunk` positions (tests use small ones); sets OpenBLAS to one thread per call (the pool's
  // threads call it side by side, as Matmul does).
  MlaGemmScratch(int threads, int64_t max_rows, int64_t n_head, int64_t head_dim, int64_t chunk = kMlaChunk);
  // Sizes the decompressed keys and values mla_attention_expanded needs (before any step).
  void reserve_expanded(int64_t k_dim, int64_t v_dim);
  int64_t max_rows() const { return max_rows_; }

 private:
  friend void mla_attention_gemm(const KvLayerView&, const float*, const int32_t*, const SeqSpan&,
                                 const AttentionParams&, int64_t, float*, MlaGemmScratch&, ThreadPool&, Isa);
  friend void mla_attention_heads_gemm(const KvLayerView&, const float*, const int32_t*, const SeqSpan&,
                                       const AttentionParams&, int64_t, float*, MlaGemmScratch&, ThreadPool&, Isa);
  friend void mla_attention_expanded(const KvLayerView&, const float*, const int32_t*, const SeqSpan&,
                                     const AttentionParams&, const MlaUpProjection&, float*, MlaGemmScratch&,
                                     ThreadPool&, Isa);
  int threads_;
  int64_t max_rows_, n_head_, head_dim_, chunk_size_;
  int64_t k_dim_ = 0, v_dim_ = 0;  // reserve_expanded's
  std::vector<float> chunk_;   // [chunk_size, head_dim] decoded latent rows
  std::vector<float> s_;       // [threads, kMlaRowBlock, chunk_size] scores, then probabilities
  std::vector<float> m_, l_;   // [max_rows, n_head] running max and sum
  std::vector<float> rows_;    // [threads, 3 * head_dim] KvRowReader scratch (row, scales, mins)
  std::vector<float> k_, v_;   // [chunk_size, k_dim], [chunk_size, v_dim] one head's keys, values
};

void mla_attention_gemm(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                        const AttentionParams& params, int64_t v_dim, float* out, MlaGemmScratch& scratch,
                        ThreadPool& pool, Isa isa = detect_isa());

// The same chunks in the expanded form (what llama.cpp and vLLM do for prefill): per chunk and
// head, the latent rows are decompressed by GEMMs into keys K = [c . wk_b[h] | k_pe]
// ([n, nope + rope]) and values V = c . wv_b[h]^T ([n, v_dim]), and the rows attend with their
// unabsorbed queries, the online softmax above:
//   q:   [n_tokens, n_head, nope_dim + rope] (q_nope | rope(q_pe)), this sequence's rows used
//   out: [n_tokens, n_head, up.v_dim] the attention output in value space (no W_UV afterwards)
// Multiply-adds: rows x positions x heads x (nope + rope + v_dim) for the attention plus
// positions x heads x r x (nope + v_dim) to decompress, against the absorbed form's rows x
// positions x heads x (L + r) plus rows x heads x r x (nope + v_dim) to absorb the queries
// and up-project; mla_expanded_pays compares the two. Needs reserve_expanded(nope + rope,
// v_dim); otherwise mla_attention_gemm's contract.
void mla_attention_expanded(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                            const AttentionParams& params, const MlaUpProjection& up, float* out,
                            MlaGemmScratch& scratch, ThreadPool& pool, Isa isa = detect_isa());

// Rows of a sequence with few rows in the batch (decode steps, short chunks) over a longer
// context, absorbed: per row, its heads are the rows of the GEMMs (every head reads the one
// latent row), chunks of kMlaHeadsChunk positions decoded once for all heads, then per block of
// heads on its own thread S = scale * q[row, heads] . chunk^T, the online softmax, out[row,
// heads] += P . chunk[:, :v_dim]. The row walk's arithmetic at GEMM speed; contract as
// mla_attention_gemm's for the rows of `seq` (in any order of positions). The model takes it
// for rows whose context reaches kMlaHeadsMinContext positions.
inline constexpr int64_t kMlaHeadsChunk = 256;
inline constexpr int64_t kMlaHeadsMinContext = 256;
void mla_attention_heads_gemm(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                              const AttentionParams& params, int64_t v_dim, float* out, MlaGemmScratch& scratch,
                              ThreadPool& pool, Isa isa = detect_isa());

// Whether the expanded form costs fewer multiply-adds than the absorbed one for rows at
// `positions` [n_rows] (increasing) of one sequence, latent rows of head_dim values.
bool mla_expanded_pays(const int32_t* positions, int64_t n_rows, int64_t head_dim, const MlaUpProjection& up);

// Reference: plain loops in double over rows read by kv_load_row_reference. Same contract.
void mla_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                             const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, int64_t v_dim,
                             float* out);

}  // namespace pagoda::kernels
