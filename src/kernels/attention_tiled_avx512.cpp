// Tiled AVX-512 paged attention (kernels/attention_tiled.h): tiles of query lanes, 16-position
// chunks of K/V decoded once per tile, online softmax with a vectorized exp, split-K parts
// merged at the end when tiles are fewer than threads.
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_ps) when inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/check.h"
#include "kernels/attention_tiled.h"
#include "kernels/attention_tiled_avx512.h"
#include "kernels/kv_block.h"

namespace pagoda::kernels::detail {
namespace {

// Lane k of the result = a[k]'s 16 lanes combined by Op (add, max): a transpose-reduce, 45
// instructions for 16 vectors.
template <__m512 (*Op)(__m512, __m512)>
inline __m512 reduce16(const __m512* a) {
  __m512 w[4];
  for (int g = 0; g < 4; ++g) {
    const __m512* v = a + 4 * g;
    const __m512 s01 = Op(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
    const __m512 s23 = Op(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23));
    w[g] = Op(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));  // 128-bit lane c: partial results of vectors 4g..4g+3
  }
  const __m512 u01 = Op(_mm512_shuffle_f32x4(w[0], w[1], 0x44), _mm512_shuffle_f32x4(w[0], w[1], 0xEE));
  const __m512 u23 = Op(_mm512_shuffle_f32x4(w[2], w[3], 0x44), _mm512_shuffle_f32x4(w[2], w[3], 0xEE));
  return Op(_mm512_shuffle_f32x4(u01, u23, 0x88), _mm512_shuffle_f32x4(u01, u23, 0xDD));
}
inline __m512 add_ps(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 max_ps(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
inline __m512 sum16(const __m512* a) { return reduce16<add_ps>(a); }
inline __m512 max16(const __m512* a) { return reduce16<max_ps>(a); }

// Attended positions of one lane: [0, sink_end) and [window_begin, n_ctx).
struct LaneMask {
  int32_t n_ctx, sink_end, window_begin;
};

// How a chunk's K/V rows are read: f32 rows through KvRowReader (decoded into scratch, or f32 ND
// rows in place), or f32 / f16 / bf16 ND rows straight from their blocks, f16 and bf16 converted
// in registers (exact: every f16 and bf16 value is an f32 value, so both ways give the same bits).
// Scaled formats (int8, fp8) read codes in place: at() is float(code), the row's f16 scale is
// applied to the row's score and probability instead (scale * dot(code, q), p * scale * code:
// the same values as the decoded rows up to float rounding).
struct RowsF32 {
  static constexpr bool kScaled = false;
  static __m512 at(const void* row, int d) { return _mm512_loadu_ps(static_cast<const float*>(row) + 16 * d); }
};
struct RowsF32Nd : RowsF32 {};  // f32 ND rows straight from their blocks
struct RowsF16 {
  static constexpr bool kScaled = false;
  static __m512 at(const void* row, int d) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(row) + d));
  }
};
struct RowsBF16 {
  static constexpr bool kScaled = false;
  static __m512 at(const void* row, int d) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(row) + d));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
};
inline __m512i widen_u8(const void* row, int d) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(row) + d));
}
struct RowsInt8 {
  static constexpr bool kScaled = true;
  static __m512 at(const void* row, int d) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(row) + d)));
  }
};
// fp8 as kernels/kv_quant_simd.inc decodes it: the 7 magnitude bits moved to bit kShift of an
// f32 (its exponent and mantissa), the sign to bit 31, times 2^kExp (the biases' difference);
// exact for finite codes, subnormals too. e4m3: <20, 120>; e5m2: <21, 112>.
template <int kShift, int kExp>
struct RowsFp8 {
  static constexpr bool kScaled = true;
  static __m512 at(const void* row, int d) {
    const __m512i u = widen_u8(row, d);
    const __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x7f)), kShift),
                                         _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x80)), 24));
    const __m512 pow2 = _mm512_castsi512_ps(_mm512_set1_epi32((127 + kExp) << 23));
    return _mm512_mul_ps(_mm512_castsi512_ps(bits), pow2);
  }
};
using RowsE4M3 = RowsFp8<20, 120>;
using RowsE5M2 = RowsFp8<21, 112>;

// The 16 scores of lane q against chunk rows k[0..16), NV vectors of 16 per row.
// Row i is at k[i] + off bytes (off: the lane's kv head in a tile of several; 0 otherwise).
template <int NV, typename Rows>
inline __m512 chunk_scores(const void* const* k, int64_t off, const float* q) {
  __m512 acc[kChunk];
#pragma GCC unroll 16
  for (int i = 0; i < kChunk; ++i) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int d = 0; d < NV; ++d) {
    const __m512 qv = _mm512_loadu_ps(q + 16 * d);
#pragma GCC unroll 16
    for (int i = 0; i < kChunk; ++i) acc[i] = _mm512_fmadd_ps(Rows::at(static_cast<const uint8_t*>(k[i]) + off, d), qv, acc[i]);
  }
  return sum16(acc);
}

// o[0..16*NV) = o * alpha + sum_i p[i] * v[i].
template <int NV, typename Rows>
inline void chunk_accumulate(float* o, __m512 alpha, const float* p, const void* const* v, int64_t off) {
  __m512 pb[kChunk];
#pragma GCC unroll 16
  for (int i = 0; i < kChunk; ++i) pb[i] = _mm512_set1_ps(p[i]);
#pragma GCC unroll 16
  for (int d = 0; d < NV; ++d) {  // two chains of 8 FMAs, not one of 16
    __m512 acc = _mm512_mul_ps(_mm512_load_ps(o + 16 * d), alpha), acc2 = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < kChunk; i += 2) {
      acc = _mm512_fmadd_ps(pb[i], Rows::at(static_cast<const uint8_t*>(v[i]) + off, d), acc);
      acc2 = _mm512_fmadd_ps(pb[i + 1], Rows::at(static_cast<const uint8_t*>(v[i + 1]) + off, d), acc2);
    }
    _mm512_store_ps(o + 16 * d, _mm512_add_ps(acc, acc2));
  }
}

// In place, rows are prefetched this many chunks ahead (all the tile's heads of a position at
// once: one contiguous run). bench/kv_layout_bench --heads 12/12 --head-dim 64 --ctx 1900, f16,
// 2 threads: 1 chunk 397-654 us a call over runs, 2 chunks 397-404, 3 chunks 403-407.
constexpr int64_t kInPlacePrefetchChunks = 2;

// Runs positions [lo, hi) of a tile. Leaves per lane: running max m, sum l, unnormalized output o.
// Rows = RowsF32: each K/V row through KvRowReader (decoded once into the chunk's scratch; one
// kv head); RowsF32Nd / RowsF16 / RowsBF16 / RowsInt8 / RowsFp8: ND rows of that dtype read in
// place by every lane, a chunk's rows of all the tile's kv heads being one contiguous run per
// position.
template <int NV, typename Rows>
void run_tile_part(const Ctx& c, const Tile& tile, int64_t lo, int64_t hi, float* area, float* m, float* l, float* o) {
  constexpr int64_t hd = 16 * NV;
  const KvLayerView& layer = c.layer;
  const int64_t B = layer.block_size, n_head = c.params.n_head;
  const SeqSpan& seq = c.seqs[tile.s];
  const int64_t seq_len = int64_t{c.positions[seq.token_begin + seq.n_tokens - 1]} + 1;
  const int64_t lanes = tile.lanes();
  float* kbuf = area;                   // [kChunk, hd]
  float* vbuf = kbuf + kChunk * hd;     // [kChunk, hd]
  float* zero = vbuf + kChunk * hd;     // [hd]
  float* row = zero + hd;               // [hd] reader scratch
  float* prm = row + hd;                // [2, hd] int4 K channel parameters
  float* probs = prm + 2 * hd;          // [kChunk]
  std::memset(zero, 0, hd * sizeof(float));
  KvRowReader k_rows(layer, true, c.ops, row, prm);
  KvRowReader v_rows(layer, false, c.ops, row, prm);

  LaneMask mask[kTileLanes];
  const float* qrow[kTileLanes];
  int32_t max_ctx = 0, min_wb = INT32_MAX, max_sink = 0;
  for (int64_t ln = 0; ln < lanes; ++ln) {
    const int64_t t = tile.row(ln), h = tile.head(ln, n_head / layer.n_kv_head);
    const int32_t n_ctx = c.positions[t] + 1;
    CHECK_LE(n_ctx, seq_len) << "rows of a sequence must be in position order";
    const AttendedRange a = attended_range(c.params, n_ctx - 1);
    mask[ln] = c.params.window > 0 ? LaneMask{n_ctx, static_cast<int32_t>(a.sink_end), static_cast<int32_t>(a.window_begin)}
                                   : LaneMask{n_ctx, 0, 0};
    qrow[ln] = c.q + (t * n_head + h) * hd;
    max_ctx = std::max(max_ctx, n_ctx);
    min_wb = std::min(min_wb, mask[ln].window_begin);
    max_sink = std::max(max_sink, mask[ln].sink_end);
    std::memset(o + ln * hd, 0, hd * sizeof(float));
  }
  hi = std::min<int64_t>(hi, max_ctx);
  auto attended_any = [&](int64_t p) { return p < max_sink || p >= min_wb; };  // p < max_ctx assumed
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  constexpr bool kInPlace = !std::is_same_v<Rows, RowsF32>;
  CHECK(kInPlace || tile.n_kv == 1) << "only in-place tiles span kv heads";
  const KvGeom kg(layer, true), vg(layer, false);
  // In place, masked positions read zero rows of all the tile's heads: the (then unused) chunk
  // buffer, kChunk * hd floats >= 16 heads' f32 rows.
  if constexpr (kInPlace) {
    CHECK_EQ(kg.code_bytes, vg.code_bytes);
    CHECK_LE(tile.n_kv * kg.code_bytes, kChunk * hd * int64_t{sizeof(float)});
    std::memset(kbuf, 0, tile.n_kv * kg.code_bytes);
    zero = kbuf;
  }
  const int64_t run_bytes_k = tile.n_kv * kg.code_bytes, run_bytes_v = tile.n_kv * vg.code_bytes;
  // Scaled formats: the f32 scales of the chunk's rows, [position i][kv head k of the tile]; a
  // lane gathers its column. Masked positions (zero rows) get scale 0.
  alignas(64) float k_scale[kChunk * 16];
  alignas(64) float v_scale[kChunk * 16];
  const __mmask16 head_mask = static_cast<__mmask16>((uint32_t{1} << tile.n_kv) - 1);
  // Lane ln's column of the chunk's scales: positions i at 16 * i + its kv head.
  const __m512i column_base = _mm512_mullo_epi32(iota, _mm512_set1_epi32(16));
  auto scale_column = [&](int64_t ln) {
    return _mm512_add_epi32(column_base, _mm512_set1_epi32(static_cast<int32_t>(tile.kv_of(ln))));
  };
  auto load_scales = [&](int64_t i, const uint8_t* k_at, const uint8_t* v_at) {  // null: zeros
    _mm512_store_ps(k_scale + 16 * i, k_at == nullptr ? _mm512_setzero_ps()
                                                      : _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(head_mask, k_at)));
    _mm512_store_ps(v_scale + 16 * i, v_at == nullptr ? _mm512_setzero_ps()
                                                      : _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(head_mask, v_at)));
  };
  int64_t lane_off[kTileLanes];  // bytes from the first kv head's row to the lane's
  for (int64_t ln = 0; ln < lanes; ++ln) lane_off[ln] = tile.kv_of(ln) * kg.code_bytes;
  const uint8_t* k_blk = nullptr;
  const uint8_t* v_blk = nullptr;
  const void* kp[kChunk];
  const void* vp[kChunk];
  int64_t k_block = -1, v_block = -1;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mv = neg_inf, lv = _mm512_setzero_ps();  // per lane: running max, running sum
  for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
    const int64_t cend = std::min(c0 + kChunk, hi);
    if (!(c0 < max_sink || cend > min_wb)) continue;  // no lane attends to this chunk
    // Position p = c0 + i is row r of block j; the prefetched one, `ahead`, row ra of block ja
    // (kept by increments: no division per position).
    const int64_t dist = (kInPlace ? kInPlacePrefetchChunks : 1) * kChunk;
    int64_t j = c0 / B, r = c0 % B, ja = (c0 + dist) / B, ra = (c0 + dist) % B;
    auto next = [B](int64_t& block, int64_t& row) {
      if (++row == B) row = 0, ++block;
    };
    for (int64_t i = 0; i < kChunk; ++i, next(j, r), next(ja, ra)) {
      const int64_t p = c0 + i;
      if (p >= cend || !attended_any(p)) {
        kp[i] = vp[i] = zero;
        if constexpr (Rows::kScaled) load_scales(i, nullptr, nullptr);
        continue;
      }
      const int64_t ahead = p + dist;
      if (ahead < hi && attended_any(ahead)) {
        const int32_t nb = seq.block_table[ja];
        if constexpr (kInPlace) {  // the readers' head is set by begin_block, which this path skips
          prefetch_bytes(kg.block(nb) + kg.row_offset(ra, tile.kv_head), run_bytes_k);
          prefetch_bytes(vg.block(nb) + vg.row_offset(ra, tile.kv_head), run_bytes_v);
        } else {
          k_rows.prefetch(nb, ra);
          v_rows.prefetch(nb, ra);
        }
      }
      if (j != k_block) {
        const int32_t b = block_at(seq, j);
        if constexpr (kInPlace) {
          k_blk = kg.block(b);
          v_blk = vg.block(b);
        } else {
          k_rows.begin_block(b, j * B, seq_len, tile.kv_head);
          v_rows.begin_block(b, j * B, seq_len, tile.kv_head);
        }
        k_block = v_block = j;
      }
      if constexpr (kInPlace) {
        kp[i] = k_blk + kg.row_offset(r, tile.kv_head);
        vp[i] = v_blk + vg.row_offset(r, tile.kv_head);
        if constexpr (Rows::kScaled) {
          load_scales(i, k_blk + kg.row_scale_offset(r, tile.kv_head), v_blk + vg.row_scale_offset(r, tile.kv_head));
        }
        continue;
      }
      const float* kr = k_rows.row(r);
      if (kr == row) kr = static_cast<const float*>(std::memcpy(kbuf + i * hd, row, hd * sizeof(float)));
      kp[i] = kr;
      const float* vr = v_rows.row(r);
      if (vr == row) vr = static_cast<const float*>(std::memcpy(vbuf + i * hd, row, hd * sizeof(float)));
      vp[i] = vr;
    }
    // Scores of every lane (-inf where masked; lanes past `lanes` all -inf), then the online
    // softmax of all lanes at once: lane ln of mv / lv / the per-chunk vectors is lane ln's.
    const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(c0)), iota);
    __m512 sv[kTileLanes];
    __mmask16 valid[kTileLanes];
    for (int64_t ln = 0; ln < kTileLanes; ++ln) {
      valid[ln] = 0;
      sv[ln] = neg_inf;
      if (ln >= lanes) continue;
      const LaneMask& mk = mask[ln];
      if (c0 >= mk.n_ctx) continue;
      if (c.params.window > 0 && !(c0 < mk.sink_end || cend > mk.window_begin)) continue;
      __mmask16 v = _mm512_cmplt_epi32_mask(pos, _mm512_set1_epi32(std::min<int32_t>(mk.n_ctx, static_cast<int32_t>(cend))));
      if (c.params.window > 0) {
        v &= _mm512_cmplt_epi32_mask(pos, _mm512_set1_epi32(mk.sink_end)) |
             _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(mk.window_begin));
      }
      if (v == 0) continue;
      valid[ln] = v;
      const int64_t off = kInPlace ? lane_off[ln] : 0;
      __m512 s = _mm512_mul_ps(chunk_scores<NV, Rows>(kp, off, qrow[ln]), _mm512_set1_ps(c.params.scale));
      if constexpr (Rows::kScaled) s = _mm512_mul_ps(s, _mm512_i32gather_ps(scale_column(ln), k_scale, 4));
      sv[ln] = _mm512_mask_mov_ps(neg_inf, v, s);
    }
    const __m512 m_new = _mm512_max_ps(mv, max16(sv));
    const SoftmaxStep step = softmax_step(mv, m_new);
    alignas(64) float base_of[kTileLanes], alpha_of[kTileLanes];
    _mm512_store_ps(base_of, step.base);
    _mm512_store_ps(alpha_of, step.alpha);
    for (int64_t ln = 0; ln < kTileLanes; ++ln) {  // probabilities; lanes with nothing here 0
      sv[ln] = valid[ln] == 0 ? _mm512_setzero_ps()
                              : _mm512_maskz_mov_ps(valid[ln], exp512(_mm512_sub_ps(sv[ln], _mm512_set1_ps(base_of[ln]))));
    }
    lv = _mm512_fmadd_ps(lv, step.alpha, sum16(sv));
    mv = m_new;
    // Outputs: a lane with nothing in this chunk keeps its o (its alpha is 1, or its o is 0).
    for (int64_t ln = 0; ln < lanes; ++ln) {
      if (valid[ln] == 0) continue;
      const int64_t off = kInPlace ? lane_off[ln] : 0;
      _mm512_storeu_ps(probs, Rows::kScaled ? _mm512_mul_ps(sv[ln], _mm512_i32gather_ps(scale_column(ln), v_scale, 4)) : sv[ln]);
      chunk_accumulate<NV, Rows>(o + ln * hd, _mm512_set1_ps(alpha_of[ln]), probs, vp, off);
    }
  }
  _mm512_storeu_ps(m, mv);
  _mm512_storeu_ps(l, lv);
}

template <typename Rows>
PartFn part_fn(int64_t hd) {
  switch (hd / 16) {
    case 1: return run_tile_part<1, Rows>;
    case 2: return run_tile_part<2, Rows>;
    case 3: return run_tile_part<3, Rows>;
    case 4: return run_tile_part<4, Rows>;
    case 5: return run_tile_part<5, Rows>;
    case 6: return run_tile_part<6, Rows>;
    case 7: return run_tile_part<7, Rows>;
    case 8: return run_tile_part<8, Rows>;
    case 10: return run_tile_part<10, Rows>;
    case 12: return run_tile_part<12, Rows>;
    case 16: return run_tile_part<16, Rows>;
    default: return nullptr;
  }
}

// Rows read in place: every ND format but int4 (whose K scales are per channel; KvRowReader
// decodes int4 and NZ rows).
bool rows_in_place(const KvLayerView& layer) {
  return layer.layout == KvLayoutKind::kND && layer.dtype != KvDType::kInt4;
}

// A sequence whose rows times group heads are at most this many lanes per kv head (a decode
// row of MHA or of a GQA group up to 8) gets tiles of several kv heads, reading rows in place:
// each lane converts every row it reads, which costs less than a decoded copy up to 8 lanes a
// row, and a chunk's rows of all those heads are one contiguous stretch of the block.
// kv_layout_bench --ctx 1900 --only f16, 2 threads, 2 vs 8 here: heads 32/4 hd 64 501-543 vs
// 403-416 us a call, 32/8 hd 128 900-1010 vs 732-805, 8/1 hd 64 83-87 vs 79-98.
constexpr int64_t kInPlaceMaxLanes = 8;

// The kernels of a layer: `many` for tiles of one kv head and more than kInPlaceMaxLanes lanes
// (matrix form, rows through KvRowReader), `few` for the others (lane by lane; rows through
// KvRowReader unless rows_in_place).
struct PartFns {
  PartFn many, few;
};
PartFns part_fns(const KvLayerView& layer) {
  const int64_t hd = layer.head_dim;
  const PartFn many = gemm_part_fn(hd);
  if (!rows_in_place(layer)) return {many, part_fn<RowsF32>(hd)};
  switch (layer.dtype) {
    case KvDType::kF16: return {many, part_fn<RowsF16>(hd)};
    case KvDType::kBF16: return {many, part_fn<RowsBF16>(hd)};
    case KvDType::kInt8: return {many, part_fn<RowsInt8>(hd)};
    case KvDType::kFp8E4M3: return {many, part_fn<RowsE4M3>(hd)};
    case KvDType::kFp8E5M2: return {many, part_fn<RowsE5M2>(hd)};
    default: return {many, part_fn<RowsF32Nd>(hd)};
  }
}

}  // namespace

void paged_attention_tiled_avx512(const KvLayerView& layer, const float* q, const int32_t* positions,
                                  const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                                  ThreadPool& pool, AttentionScratch& scratch) {
  const int64_t hd = layer.head_dim, n_kv_head = layer.n_kv_head, n_head = params.n_head;
  CHECK_EQ(n_head % n_kv_head, 0);
  const int64_t group = n_head / n_kv_head;
  const PartFns fns = part_fns(layer);
  CHECK(fns.many != nullptr && fns.few != nullptr) << "tiled attention: head_dim " << hd << " has no kernel";
  const Ctx ctx{layer, q, positions, seqs, params, kv_row_ops(Isa::kAvx512)};

  // Tiles: per sequence, kv head, chunk of the group's heads, chunk of rows; or, for sequences
  // of few lanes per kv head with rows read in place, per sequence and run of kv heads.
  std::vector<int64_t>& items = scratch.tile_items();
  items.clear();
  const bool in_place = rows_in_place(layer);
  const int64_t ng = std::min(group, kTileLanes), nr_max = std::max<int64_t>(1, kTileLanes / ng);
  int64_t longest = 1, work = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const SeqSpan& seq = seqs[s];
    CHECK_GT(seq.n_tokens, 0) << "empty sequence span";
    CHECK(s == 0 || seq.token_begin >= seqs[s - 1].token_begin + seqs[s - 1].n_tokens) << "sequences overlap";
    const int64_t len = int64_t{positions[seq.token_begin + seq.n_tokens - 1]} + 1;
    longest = std::max(longest, len);
    const int64_t per_kv = group * seq.n_tokens;
    if (in_place && per_kv <= kInPlaceMaxLanes) {
      const int64_t kv_per_tile = kTileLanes / per_kv;
      for (int64_t kv0 = 0; kv0 < n_kv_head; kv0 += kv_per_tile) {
        const int64_t n_kv = std::min(kv_per_tile, n_kv_head - kv0);
        items.insert(items.end(), {s, kv0, n_kv, kv0 * group, group, seq.token_begin, seq.n_tokens});
        work += len * per_kv * n_kv;
      }
      continue;
    }
    for (int64_t kvh = 0; kvh < n_kv_head; ++kvh) {
      for (int64_t h0 = kvh * group; h0 < (kvh + 1) * group; h0 += ng) {
        for (int64_t t0 = seq.token_begin; t0 < seq.token_begin + seq.n_tokens; t0 += nr_max) {
          const int64_t nr = std::min(nr_max, seq.token_begin + seq.n_tokens - t0);
          items.insert(items.end(), {s, kvh, 1, h0, std::min(ng, (kvh + 1) * group - h0), t0, nr});
          work += len * nr * ng;
        }
      }
    }
  }
  const int64_t n_tiles = static_cast<int64_t>(items.size()) / kItemFields;
  // Split-K: enough parts that every thread has work, each part at least 64 positions.
  const int64_t threads = pool.num_threads();
  int64_t parts = 1;
  if (n_tiles < threads) parts = std::min<int64_t>((threads + n_tiles - 1) / n_tiles, std::max<int64_t>(1, longest / 64));
  const int64_t span = (longest + parts - 1) / parts;
  const int64_t part_len = (span + kChunk - 1) / kChunk * kChunk;
  const int64_t part_stride = kTileLanes * (hd + 2);  // per (tile, part): o [lanes, hd], m [lanes], l [lanes]
  std::vector<float>& partial = scratch.split_parts();
  if (parts > 1 && static_cast<int64_t>(partial.size()) < n_tiles * parts * part_stride) partial.resize(n_tiles * parts * part_stride);

  auto tile_at = [&](int64_t i) {
    const int64_t* f = items.data() + i * kItemFields;
    return Tile{f[0], f[1], f[2], f[3], f[4], f[5], f[6]};
  };
  const int64_t work_per_item = 2 * hd * std::max<int64_t>(1, work / std::max<int64_t>(1, n_tiles * parts));
  pool.parallel_for(n_tiles * parts, [&](int64_t begin, int64_t end, int thread) {
    float* area = scratch.tile(thread);
    float* o = lane_outputs(area, hd);  // [kTileLanes, hd], 64-byte aligned (hd % 16 == 0)
    float m[kTileLanes], l[kTileLanes];
    for (int64_t item = begin; item < end; ++item) {
      const Tile tile = tile_at(item / parts);
      const int64_t part = item % parts;
      const int64_t lanes = tile.lanes();
      const PartFn fn = tile.n_kv > 1 || lanes <= kInPlaceMaxLanes ? fns.few : fns.many;
      fn(ctx, tile, part * part_len, (part + 1) * part_len, area, m, l, o);
      if (parts == 1) {
        for (int64_t ln = 0; ln < lanes; ++ln) {
          const int64_t t = tile.row(ln), h = tile.head(ln, group);
          const __m512 inv = _mm512_set1_ps(1.0f / l[ln]);
          float* dst = out + (t * n_head + h) * hd;
          for (int64_t d = 0; d < hd; d += 16) _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_load_ps(o + ln * hd + d), inv));
        }
      } else {
        float* dst = partial.data() + item * part_stride;
        std::memcpy(dst, o, lanes * hd * sizeof(float));
        std::memcpy(dst + kTileLanes * hd, m, lanes * sizeof(float));
        std::memcpy(dst + kTileLanes * (hd + 1), l, lanes * sizeof(float));
      }
    }
  }, ThreadPool::grain_for(work_per_item, ThreadPool::kMinWorkPerThread));
  if (parts == 1) return;

  // Merge: out = sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) l_p, M the largest m_p.
  pool.parallel_for(n_tiles, [&](int64_t begin, int64_t end, int) {
    for (int64_t ti = begin; ti < end; ++ti) {
      const Tile tile = tile_at(ti);
      const float* base = partial.data() + ti * parts * part_stride;
      for (int64_t ln = 0; ln < tile.lanes(); ++ln) {
        float big = -INFINITY;
        for (int64_t p = 0; p < parts; ++p) big = std::max(big, base[p * part_stride + kTileLanes * hd + ln]);
        float sum = 0.0f;
        float w[64];
        CHECK_LE(parts, 64);
        for (int64_t p = 0; p < parts; ++p) {
          const float mp = base[p * part_stride + kTileLanes * hd + ln];
          w[p] = mp == -INFINITY ? 0.0f : std::exp(mp - big);
          sum += w[p] * base[p * part_stride + kTileLanes * (hd + 1) + ln];
        }
        const int64_t t = tile.row(ln), h = tile.head(ln, group);
        float* dst = out + (t * n_head + h) * hd;
        for (int64_t d = 0; d < hd; d += 16) {
          __m512 acc = _mm512_setzero_ps();
          for (int64_t p = 0; p < parts; ++p) {
            acc = _mm512_fmadd_ps(_mm512_set1_ps(w[p]), _mm512_loadu_ps(base + p * part_stride + ln * hd + d), acc);
          }
          _mm512_storeu_ps(dst + d, _mm512_mul_ps(acc, _mm512_set1_ps(1.0f / sum)));
        }
      }
    }
  });
}

}  // namespace pagoda::kernels::detail
