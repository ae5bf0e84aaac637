// Internal to the tiled AVX-512 paged attention (kernels/attention_tiled.h): what its two
// translation units share. Included only by files compiled for AVX-512 (*_avx512.cpp).
//   attention_tiled_avx512.cpp       the work list, split-K and its merge; the lane-by-lane tile
//                                    parts (decode rows, in-place multi-head tiles)
//   attention_tiled_gemm_avx512.cpp  the matrix-form tile part of prefill tiles
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/attention_tiled.h"
#include "kernels/exp_avx512.h"
#include "kernels/kv_quant.h"

namespace pagoda::kernels::detail {

// One step of the online softmax of 16 lanes whose running max goes from m to m_new (lane by
// lane): the base to subtract from this chunk's scores before exp, and alpha, the factor that
// rescales the lane's running sum and output. A lane with nothing attended yet keeps m = -inf:
// base 0 (its probabilities are masked to 0 by the caller); a lane with no earlier max gets
// alpha 0 (its sum and output are 0).
struct SoftmaxStep {
  __m512 base, alpha;
};
inline SoftmaxStep softmax_step(__m512 m, __m512 m_new) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512 base = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m_new, neg_inf, _CMP_NEQ_OQ), m_new);
  return {base, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, neg_inf, _CMP_NEQ_OQ), exp512(_mm512_sub_ps(m, base)))};
}

inline int32_t block_at(const SeqSpan& seq, int64_t index) {
  CHECK_LT(index, seq.num_blocks) << "block " << index << " beyond the block table";
  const int32_t block = seq.block_table[index];
  CHECK_GE(block, 0) << "attention reads block " << index << ", a hole of the block table";
  return block;
}

// One tile: sequence s, kv heads [kv_head, kv_head + n_kv), query heads [h0, h0 + ng) of the
// first (the same ones of each next group), batch rows [t0, t0 + nr). Lane ln is row
// t0 + ln / (n_kv * ng), kv head kv_head + (ln / ng) % n_kv, query head h(ln) below. Tiles of
// several kv heads (n_kv > 1, whole groups: ng == group) read their rows in place.
struct Tile {
  int64_t s, kv_head, n_kv, h0, ng, t0, nr;
  int64_t lanes() const { return nr * n_kv * ng; }
  int64_t row(int64_t ln) const { return t0 + ln / (n_kv * ng); }
  int64_t kv_of(int64_t ln) const { return (ln / ng) % n_kv; }  // relative to kv_head
  int64_t head(int64_t ln, int64_t group) const { return h0 + kv_of(ln) * group + ln % ng; }
};
inline constexpr int64_t kItemFields = 7;

struct Ctx {
  const KvLayerView& layer;
  const float* q;
  const int32_t* positions;
  const SeqSpan* seqs;
  const AttentionParams& params;
  const KvRowOps& ops;
};

// Runs positions [lo, hi) of a tile in `area` (attention_tiled.h's layout). Leaves per lane
// ln < tile.lanes(): running max m[ln], sum l[ln] and unnormalized output o[ln * hd, +hd).
// m, l: [kTileLanes] (lanes past tile.lanes() are written too, with nothing in them).
using PartFn = void (*)(const Ctx&, const Tile&, int64_t lo, int64_t hi, float* area, float* m, float* l, float* o);

// The matrix-form part for tiles of one kv head (any format and layout: rows through
// KvRowReader), head_dim 16 * {1..8, 10, 12, 16}; null for other head dims.
PartFn gemm_part_fn(int64_t hd);

}  // namespace pagoda::kernels::detail
