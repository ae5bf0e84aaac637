// The matrix-form tile part of the tiled AVX-512 paged attention (kernels/attention_tiled.h):
// prefill tiles of one kv head, flash-attention style.
//
// A tile's 16 query lanes are the 16 f32 lanes of a register. Per chunk of 16 key positions:
//   S [16 keys][16 lanes]  = K_chunk [16, hd] x Q^T [hd, 16 lanes]   (16 * hd FMAs, each a Q^T
//                            row times one K element broadcast; no horizontal sums)
//   online softmax down the keys: per lane max, rescale factor, exp, sum -- all vertical
//   O^T [hd][16 lanes]    = O^T * alpha + V_chunk^T [hd, 16] x P [16 keys][16 lanes]
//                            (hd * 16 FMAs, each a P row times one V element broadcast)
// K and V rows are decoded once per chunk into the tile's f32 chunk buffers by KvRowReader (so
// every format and layout runs here, and NZ gives ND's bits), then shared by all 16 lanes.
// Q^T holds the queries times the softmax scale. Lanes past tile.lanes() have no attended key.
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_ps) when inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/attention_tiled_avx512.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "kernels/kv_block.h"

namespace pagoda::kernels::detail {
namespace {

constexpr int kDimStep = 8;  // Q^T / O^T rows held in registers at a time

// s[i] = sum_d qt[d][.] * k[i][d]: chunk scores, lanes = queries.
template <int NV>
inline void chunk_scores_gemm(const float* qt, const float* k, __m512 (&s)[kChunk]) {
  constexpr int hd = 16 * NV;
#pragma GCC unroll 16
  for (int i = 0; i < kChunk; ++i) s[i] = _mm512_setzero_ps();
  for (int d0 = 0; d0 < hd; d0 += kDimStep) {
    __m512 qv[kDimStep];
#pragma GCC unroll 8
    for (int j = 0; j < kDimStep; ++j) qv[j] = _mm512_load_ps(qt + (d0 + j) * kTileLanes);
#pragma GCC unroll 16
    for (int i = 0; i < kChunk; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < kDimStep; ++j) s[i] = _mm512_fmadd_ps(qv[j], _mm512_set1_ps(k[i * hd + d0 + j]), s[i]);
    }
  }
}

// ot[d][.] = ot[d][.] * alpha + sum_i p[i] * v[i][d].
template <int NV>
inline void chunk_accumulate_gemm(float* ot, __m512 alpha, const __m512 (&p)[kChunk], const float* v) {
  constexpr int hd = 16 * NV;
  for (int d0 = 0; d0 < hd; d0 += kDimStep) {
    __m512 acc[kDimStep];
#pragma GCC unroll 8
    for (int j = 0; j < kDimStep; ++j) acc[j] = _mm512_mul_ps(_mm512_load_ps(ot + (d0 + j) * kTileLanes), alpha);
#pragma GCC unroll 16
    for (int i = 0; i < kChunk; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < kDimStep; ++j) acc[j] = _mm512_fmadd_ps(p[i], _mm512_set1_ps(v[i * hd + d0 + j]), acc[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < kDimStep; ++j) _mm512_store_ps(ot + (d0 + j) * kTileLanes, acc[j]);
  }
}

template <int NV>
void run_tile_part_gemm(const Ctx& c, const Tile& tile, int64_t lo, int64_t hi, float* area, float* m, float* l,
                        float* o) {
  constexpr int64_t hd = 16 * NV;
  const KvLayerView& layer = c.layer;
  CHECK_EQ(tile.n_kv, 1) << "matrix-form tiles serve one kv head";
  const int64_t B = layer.block_size, n_head = c.params.n_head, group = n_head / layer.n_kv_head;
  const SeqSpan& seq = c.seqs[tile.s];
  const int64_t seq_len = int64_t{c.positions[seq.token_begin + seq.n_tokens - 1]} + 1;
  const int64_t lanes = tile.lanes();
  float* kbuf = area;                        // [kChunk, hd]
  float* vbuf = kbuf + kChunk * hd;          // [kChunk, hd]
  float* row = vbuf + (kChunk + 1) * hd;     // [hd] reader scratch
  float* prm = row + hd;                     // [2, hd] int4 K channel parameters
  float* qt = gemm_panels(area, hd);         // [hd, kTileLanes]
  float* ot = qt + hd * kTileLanes;          // [hd, kTileLanes]
  KvRowReader k_rows(layer, true, c.ops, row, prm);
  KvRowReader v_rows(layer, false, c.ops, row, prm);

  // Lanes: scaled queries as columns of Q^T, attended ranges as vectors.
  alignas(64) int32_t n_ctx[kTileLanes], sink_end[kTileLanes], window_begin[kTileLanes];
  int32_t max_ctx = 0, min_wb = INT32_MAX, max_sink = 0;
  for (int64_t ln = 0; ln < kTileLanes; ++ln) {
    if (ln >= lanes) {
      n_ctx[ln] = sink_end[ln] = window_begin[ln] = 0;
      for (int64_t d = 0; d < hd; ++d) qt[d * kTileLanes + ln] = 0.0f;
      continue;
    }
    const int64_t t = tile.row(ln), h = tile.head(ln, group);
    n_ctx[ln] = c.positions[t] + 1;
    CHECK_LE(n_ctx[ln], seq_len) << "rows of a sequence must be in position order";
    const AttendedRange a = attended_range(c.params, n_ctx[ln] - 1);
    sink_end[ln] = c.params.window > 0 ? static_cast<int32_t>(a.sink_end) : 0;
    window_begin[ln] = c.params.window > 0 ? static_cast<int32_t>(a.window_begin) : 0;
    const float* qrow = c.q + (t * n_head + h) * hd;
    for (int64_t d = 0; d < hd; ++d) qt[d * kTileLanes + ln] = qrow[d] * c.params.scale;
    max_ctx = std::max(max_ctx, n_ctx[ln]);
    min_wb = std::min(min_wb, window_begin[ln]);
    max_sink = std::max(max_sink, sink_end[ln]);
  }
  std::memset(ot, 0, hd * kTileLanes * sizeof(float));
  const __m512i ctx_v = _mm512_load_si512(n_ctx);
  const __m512i sink_v = _mm512_load_si512(sink_end);
  const __m512i wb_v = _mm512_load_si512(window_begin);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mv = neg_inf, lv = _mm512_setzero_ps();

  hi = std::min<int64_t>(hi, max_ctx);
  auto attended_any = [&](int64_t p) { return p < max_sink || p >= min_wb; };  // p < max_ctx assumed
  int64_t block_index = -1;
  for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
    const int64_t cend = std::min(c0 + kChunk, hi);
    if (!(c0 < max_sink || cend > min_wb)) continue;  // no lane attends to this chunk
    // The chunk's K and V rows, decoded into kbuf / vbuf; zero rows where nobody attends.
    __mmask16 valid[kChunk];
    for (int64_t i = 0; i < kChunk; ++i) {
      const int64_t p = c0 + i;
      float* kd = kbuf + i * hd;
      float* vd = vbuf + i * hd;
      if (p >= cend || !attended_any(p)) {
        valid[i] = 0;
        std::memset(kd, 0, hd * sizeof(float));
        std::memset(vd, 0, hd * sizeof(float));
        continue;
      }
      const __m512i pv = _mm512_set1_epi32(static_cast<int32_t>(p));
      valid[i] = _mm512_cmpgt_epi32_mask(ctx_v, pv);
      if (c.params.window > 0) valid[i] &= _mm512_cmpgt_epi32_mask(sink_v, pv) | _mm512_cmpge_epi32_mask(pv, wb_v);
      const int64_t ahead = p + kChunk;
      if (ahead < hi && attended_any(ahead)) {
        const int32_t nb = seq.block_table[ahead / B];
        k_rows.prefetch(nb, ahead % B);
        v_rows.prefetch(nb, ahead % B);
      }
      const int64_t j = p / B, r = p % B;
      if (j != block_index) {
        const int32_t b = block_at(seq, j);
        k_rows.begin_block(b, j * B, seq_len, tile.kv_head);
        v_rows.begin_block(b, j * B, seq_len, tile.kv_head);
        block_index = j;
      }
      const float* kr = k_rows.row(r, kd);
      if (kr != kd) std::memcpy(kd, kr, hd * sizeof(float));
      const float* vr = v_rows.row(r, vd);
      if (vr != vd) std::memcpy(vd, vr, hd * sizeof(float));
    }

    __m512 s[kChunk];
    chunk_scores_gemm<NV>(qt, kbuf, s);
    __m512 cmax = neg_inf;
#pragma GCC unroll 16
    for (int i = 0; i < kChunk; ++i) {
      s[i] = _mm512_mask_mov_ps(neg_inf, valid[i], s[i]);
      cmax = _mm512_max_ps(cmax, s[i]);
    }
    const __m512 m_new = _mm512_max_ps(mv, cmax);
    const auto [base, alpha] = softmax_step(mv, m_new);
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < kChunk; ++i) {
      s[i] = _mm512_maskz_mov_ps(valid[i], exp512(_mm512_sub_ps(s[i], base)));
      sum = _mm512_add_ps(sum, s[i]);
    }
    lv = _mm512_fmadd_ps(lv, alpha, sum);
    mv = m_new;
    chunk_accumulate_gemm<NV>(ot, alpha, s, vbuf);
  }

  _mm512_storeu_ps(m, mv);
  _mm512_storeu_ps(l, lv);
  for (int64_t ln = 0; ln < lanes; ++ln) {
    for (int64_t d = 0; d < hd; ++d) o[ln * hd + d] = ot[d * kTileLanes + ln];
  }
}

}  // namespace

PartFn gemm_part_fn(int64_t hd) {
  switch (hd / 16) {
    case 1: return run_tile_part_gemm<1>;
    case 2: return run_tile_part_gemm<2>;
    case 3: return run_tile_part_gemm<3>;
    case 4: return run_tile_part_gemm<4>;
    case 5: return run_tile_part_gemm<5>;
    case 6: return run_tile_part_gemm<6>;
    case 7: return run_tile_part_gemm<7>;
    case 8: return run_tile_part_gemm<8>;
    case 10: return run_tile_part_gemm<10>;
    case 12: return run_tile_part_gemm<12>;
    case 16: return run_tile_part_gemm<16>;
    default: return nullptr;
  }
}

}  // namespace pagoda::kernels::detail
