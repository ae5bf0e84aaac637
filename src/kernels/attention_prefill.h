// Internal to the kernels: prefill attention as matrix work on AVX2 + FMA (paged_attention on
// Isa::kAvx2 for batch rows that share their sequence with others: prefill chunks).
//
// The per-row path of attention.cpp decodes every K and V row once per query row, so a prefill
// chunk of T rows decodes each cached row T times and spends most of its time converting. Here a
// tile is 8 lanes of one sequence and one kv head, a lane being one (batch row, query head of
// the group) pair, lanes ordered row by row; the 8 lanes are the 8 f32 lanes of a register. The
// tile walks its attended positions 8 at a time (a chunk): the chunk's K and V rows are decoded
// once into scratch (KvRowReader: every format and layout), the scores are K_chunk x Q^T (each K
// element broadcast against the 8 lanes' query values), masked per lane (causal, window, sinks),
// and an online softmax (flash-attention style) keeps each lane's running max, sum and
// unnormalized output O^T [head_dim, 8], rescaled as the max grows; no horizontal sum anywhere.
// Chunks no lane attends to are skipped without reading their block-table entries.
//
// Accuracy: f32 arithmetic (the query is pre-multiplied by the scale), exp a degree-6 polynomial
// within 2 ulp of expf (exp_avx2.h); held by the attention tests to the same 1e-5 of exact
// attention as every other path.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace pagoda::kernels::detail {

inline constexpr int64_t kPrefillLanes = 8;  // query lanes per tile
inline constexpr int64_t kPrefillChunk = 8;  // key positions per step

// A thread's area for this kernel, in floats: K chunk [8, hd], V chunk [8, hd], Q^T [hd, 8],
// O^T [hd, 8]: 32 hd (AttentionScratch::tile_floats covers it).
inline int64_t prefill_area_floats(int64_t hd) { return 32 * hd; }

// paged_attention's contract (kernels/attention.h) for the rows of every sequence with two or
// more rows in the batch (prefill chunks); rows of single-row sequences are left untouched.
// Runs on Isa::kAvx2 and up; `ops` decodes the K/V rows.
void paged_attention_prefill_avx2(const KvLayerView& layer, const float* q, const int32_t* positions,
                                  const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                                  ThreadPool& pool, AttentionScratch& scratch, const KvRowOps& ops);

}  // namespace pagoda::kernels::detail
