// Internal to the kernels: the tiled AVX-512 paged attention that paged_attention runs for
// Isa::kAvx512 when head_dim % 16 == 0 (kernels/attention.h has the contract and the layouts).
//
// Work: a tile is up to kTileLanes query lanes of one sequence and one kv head, a lane being one
// (batch row, query head of the kv head's group) pair -- several rows of a prefill chunk and all
// heads of a GQA group share one pass over the K/V rows. The tile walks its attended positions
// 16 at a time (a chunk): the chunk's K and V rows are decoded once into f32 scratch (f32 ND
// rows are read in place) and every lane then computes its 16 scores (one FMA chain per key,
// a transpose-reduce of the 16 sums) and masks them; the online softmax (flash-attention style)
// then updates all lanes at once -- a transpose-max of the lanes' scores gives every lane's
// chunk max in one vector, the rescale factors are one vector exp, a transpose-sum adds the
// probabilities -- and each lane adds its weighted V rows to its output. Chunks no lane
// attends to are skipped without reading their block-table entries.
// Decode rows (at most 8 lanes per kv head: MHA, or GQA groups up to 8) over ND blocks of any
// format but int4 get tiles of up to 16 kv heads instead, which read K/V rows in place (codes
// converted in registers, no scratch copy; int8 / fp8 rows' scales applied to their scores and
// probabilities): a chunk's rows of all those heads are one contiguous stretch of each block,
// streamed and prefetched as such (llama-110m f16 at depth 1,900: 48 -> 85 decode tokens/s,
// BENCHMARKS.md).
// Split-K (flash-decoding): when there are fewer tiles than threads, each tile's positions are
// split into parts that run on different threads, each part keeping (max, sum, unnormalized
// output) per lane; a final merge rescales and adds the parts.
// Tiles of more than 8 lanes of one kv head (prefill chunks, GQA groups over 8) run as matrix
// work instead (kernels/attention_tiled_gemm_avx512.cpp): the 16 lanes are the 16 f32 lanes of
// a register, a chunk's scores are K_chunk x Q^T and its outputs V_chunk^T x P, each element of
// K and V broadcast against a column of 16 lanes; the softmax runs down the chunk's keys with
// no horizontal reduction (llama-110m f16 prefill of 1,900 tokens: 1,311-1,403 -> 1,979-2,037
// tokens/s, BENCHMARKS.md).
// Accuracy: f32 arithmetic, summation order differs from the scalar reference; exp is a
// degree-6 polynomial with 2^n scaling, within 2 ulp of expf over the range softmax uses.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace pagoda::kernels::detail {

inline constexpr int64_t kTileLanes = 16;  // query lanes per tile
inline constexpr int64_t kChunk = 16;      // key positions per step

// A thread's tile area (AttentionScratch::tile, 64-byte aligned), in floats, hd = head_dim
// (a multiple of 16):
//   [0, 16hd)            K chunk [kChunk, hd]        [16hd, 32hd)  V chunk [kChunk, hd]
//   [32hd, 33hd)         zero row [hd]               [33hd, 34hd)  reader row [hd]
//   [34hd, 36hd)         int4 K channel parameters [2, hd]
//   [36hd, 36hd + 16)    probabilities [kChunk]
//   lane_outputs()       o [kTileLanes, hd]: a part's unnormalized outputs, lane by lane
//   gemm_panels()        Q^T [hd, kTileLanes] then O^T [hd, kTileLanes] of the matrix-form tiles
inline float* lane_outputs(float* area, int64_t hd) { return area + (2 * kChunk + 4) * hd + kChunk; }
inline float* gemm_panels(float* area, int64_t hd) { return lane_outputs(area, hd) + kTileLanes * hd + 16; }
inline int64_t tile_area_floats(int64_t hd) { return (2 * kChunk + 4 + 3 * kTileLanes) * hd + kChunk + 16; }

// Whether the tiled kernel handles this layer: head_dim 16 * {1..8, 10, 12, 16}.
inline bool tiled_attention_supports(const KvLayerView& layer) {
  if (layer.head_dim % 16 != 0) return false;
  const int64_t nv = layer.head_dim / 16;
  return (nv >= 1 && nv <= 8) || nv == 10 || nv == 12 || nv == 16;
}

void paged_attention_tiled_avx512(const KvLayerView& layer, const float* q, const int32_t* positions,
                                  const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                                  ThreadPool& pool, AttentionScratch& scratch);

}  // namespace pagoda::kernels::detail
