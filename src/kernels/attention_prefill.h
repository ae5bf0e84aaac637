// Internal to the kernels: prefill attention as matrix work on AVX2 + FMA (paged_attention on
// Isa::kAvx2, and on AVX-512 where the tiled kernel does not take the layer, for batch rows that
// share their sequence with others: prefill chunks).
//
// The per-row path of attention.cpp decodes every K and V row once per query row, so a prefill
// chunk of T rows decodes each cached row T times and spends most of its time converting. Here a
// tile is 8 lanes of one sequence and one kv head, a lane being one (batch row, query head of
// the group) pair, lanes ordered row by row; the 8 lanes are the 8 f32 lanes of a register. An
// item is the tiles of one (sequence, kv head) (or a part of them when there are fewer items
// than twice the threads); it walks the attended positions kPrefillKeyBlock at a time, decodes
// that key block's K and V rows once into the thread's scratch (KvRowReader: every format and
// layout) and runs every tile over it, 8 positions (a chunk) at a time: the scores are
// K_chunk x Q^T (each K element broadcast against the 8 lanes' query values), masked per lane
// (causal, window, sinks), and an online softmax (flash-attention style) keeps each lane's
// running max, sum and unnormalized output O^T [head_dim, 8] across chunks and key blocks,
// rescaled as the max grows; no horizontal sum anywhere. Positions no lane attends are never
// read (block-table holes of freed windows included).
//
// Accuracy: f32 arithmetic (the query is pre-multiplied by the scale), exp a degree-6 polynomial
// within 2 ulp of expf (exp_avx2.h); held by the attention tests to the same 1e-5 of exact
// attention as every other path.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace pagoda::kernels::detail {

inline constexpr int64_t kPrefillLanes = 8;       // query lanes per tile
inline constexpr int64_t kPrefillChunk = 8;       // key positions per step
inline constexpr int64_t kPrefillKeyBlock = 128;  // key positions decoded at a time (a multiple of the chunk)
// Per thread (AttentionScratch::prefill_floats / prefill_ints, grown to the largest item):
//   floats  K block [kPrefillKeyBlock, hd], V block [kPrefillKeyBlock, hd], then per tile Q^T
//           [hd, 8], O^T [hd, 8], max [8], sum [8]
//   ints    per tile its lanes: contexts, sink ends, window starts, rows, heads [5, 8]

// paged_attention's contract (kernels/attention.h) for the rows of every sequence with two or
// more rows in the batch (prefill chunks); rows of single-row sequences are left untouched.
// Runs on Isa::kAvx2 and up; `ops` decodes the K/V rows.
void paged_attention_prefill_avx2(const KvLayerView& layer, const float* q, const int32_t* positions,
                                  const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                                  ThreadPool& pool, AttentionScratch& scratch, const KvRowOps& ops);

}  // namespace pagoda::kernels::detail
