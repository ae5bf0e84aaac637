// k-quant decode kernels for AVX-512 (BW, VL, VNNI): Q4_K / Q5_K / Q6_K weight rows against
// Q8_K activations, 64 values per zmm step.
//
// The arithmetic is that of matmul_kquant_avx2.cpp (see there), on 512-bit vectors: each
// 64-value chunk c (two Q4_K/Q5_K sub-blocks, four Q6_K sub-blocks) is unpacked once to
// unsigned bytes, dotted with every token's 64 x quants by vpmaddubsw, and the i16 pairs are
// multiplied by their sub-block scales and summed into i32 by one vpdpwssd. A whole decode
// batch (up to 7 tokens) runs in one pass; 1-2 tokens take 4 rows per pass, 3-4 take 2.
#include <immintrin.h>

// GCC 12's AVX-512 headers start several intrinsics from _mm512_undefined_*(), which trips
// -Wmaybe-uninitialized at -O2 (a false positive inside the system header).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "core/check.h"
#include "kernels/matmul_isa.h"

namespace pagoda::kernels::detail {

namespace {

constexpr int kMaxTile = 7;
constexpr int kRows(int n_tokens) { return n_tokens <= 2 ? 4 : n_tokens <= 4 ? 2 : 1; }

inline float f16(uint16_t h) { return _cvtsh_ss(h); }
inline __m512i broadcast256(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
// Shift counts per 16-bit lane: `lo` in the low 256 bits, `hi` in the high 256 bits.
inline __m512i shifts(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}
// i16 lane indices for vpermw: lanes [8 s, 8 s + 8) read element e_s.
inline __m512i lane_index(int e0, int e1, int e2, int e3) {
  return _mm512_setr_epi64(0x0001000100010001LL * e0, 0x0001000100010001LL * e0, 0x0001000100010001LL * e1,
                           0x0001000100010001LL * e1, 0x0001000100010001LL * e2, 0x0001000100010001LL * e2,
                           0x0001000100010001LL * e3, 0x0001000100010001LL * e3);
}

// Q4_K / Q5_K 6-bit scales and mins as i16 vectors (scales in lanes 0..7, mins in 8..15).
inline __m256i unpack_scales_mins(const uint8_t* packed) {
  uint64_t sc, m;
  unpack_kquant_scales_u64(packed, &sc, &m);
  return _mm256_cvtepu8_epi16(_mm_set_epi64x(static_cast<int64_t>(m), static_cast<int64_t>(sc)));
}

struct Q45Base {
  __m512i sm;  // i16: lanes 0..7 scales, 8..15 mins (in both 256-bit halves)
  float d, dc;
  // Chunk c: lanes 0..15 scale 2c, lanes 16..31 scale 2c + 1.
  __m512i scale16(int c) const { return _mm512_permutexvar_epi16(lane_index(2 * c, 2 * c, 2 * c + 1, 2 * c + 1), sm); }
  // Per bsum i: m[i / 2], in the low 256 bits.
  __m256i offset16() const {
    return _mm512_castsi512_si256(_mm512_permutexvar_epi16(
        _mm512_setr_epi64(0x0009000900080008LL, 0x000b000b000a000aLL, 0x000d000d000c000cLL, 0x000f000f000e000eLL, 0,
                          0, 0, 0),
        sm));
  }
};

struct Q4K : Q45Base {
  static constexpr int kBytes = sizeof(BlockQ4_K);
  const BlockQ4_K* blk;
  void init(const uint8_t* p) {
    blk = reinterpret_cast<const BlockQ4_K*>(p);
    sm = _mm512_broadcast_i64x4(unpack_scales_mins(blk->scales));
    d = f16(blk->d);
    dc = f16(blk->dmin);
  }
  __m512i quants(int c) const {
    return _mm512_and_si512(_mm512_srlv_epi16(broadcast256(blk->qs + 32 * c), shifts(0, 4)), _mm512_set1_epi8(15));
  }
};

struct Q5K : Q45Base {
  static constexpr int kBytes = sizeof(BlockQ5_K);
  const BlockQ5_K* blk;
  __m512i qh;
  void init(const uint8_t* p) {
    blk = reinterpret_cast<const BlockQ5_K*>(p);
    sm = _mm512_broadcast_i64x4(unpack_scales_mins(blk->scales));
    d = f16(blk->d);
    dc = f16(blk->dmin);
    qh = broadcast256(blk->qh);
  }
  __m512i quants(int c) const {
    const __m512i low =
        _mm512_and_si512(_mm512_srlv_epi16(broadcast256(blk->qs + 32 * c), shifts(0, 4)), _mm512_set1_epi8(15));
    const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts(2 * c, 2 * c + 1)), _mm512_set1_epi8(1));
    return _mm512_or_si512(low, _mm512_slli_epi16(bit, 4));
  }
};

struct Q6K {
  static constexpr int kBytes = sizeof(BlockQ6_K);
  const BlockQ6_K* blk;
  __m512i sc;  // i16: the 16 scales, in both halves
  float d, dc;
  void init(const uint8_t* p) {
    blk = reinterpret_cast<const BlockQ6_K*>(p);
    sc = _mm512_broadcast_i64x4(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales))));
    d = dc = f16(blk->d);
  }
  // Chunk c = 2 half + p: values 128 half + 64 p .. + 63, i.e. groups g = 2p and 2p + 1.
  __m512i quants(int c) const {
    const int half = c / 2, p = c % 2;
    const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * half);
    const __m512i low = _mm512_and_si512(p == 0 ? ql : _mm512_srli_epi16(ql, 4), _mm512_set1_epi8(15));
    const __m512i hb = _mm512_srlv_epi16(broadcast256(blk->qh + 32 * half), shifts(4 * p, 4 * p + 2));
    return _mm512_or_si512(low, _mm512_slli_epi16(_mm512_and_si512(hb, _mm512_set1_epi8(3)), 4));
  }
  // Lanes [8 s, 8 s + 8): scale 4c + s (the 16 values of sub-block 4c + s).
  __m512i scale16(int c) const { return _mm512_permutexvar_epi16(lane_index(4 * c, 4 * c + 1, 4 * c + 2, 4 * c + 3), sc); }
  __m256i offset16() const { return _mm256_slli_epi16(_mm512_castsi512_si256(sc), 5); }  // 32 * scale per bsum
};

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

template <typename Fmt, int NT, int R>
__attribute__((noinline)) void rows_kquant(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end,
                                           float* y, int64_t ldy) {
  const int64_t nb = w.n_in / kQK_K;
  const size_t row_bytes = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t slice = (o_end - o_begin) / R;
  for (int64_t j = 0; j < slice; ++j) {
    int64_t o[R];
    const uint8_t* rows[R];
    __m512 acc[R][NT];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      o[r] = o_begin + r * slice + j;
      rows[r] = base + o[r] * row_bytes;
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_K* xb[NT];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) xb[t] = x.q8k + t * nb + b;
      Fmt blk[R];
      __m512i isum[R][NT];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        blk[r].init(rows[r] + b * Fmt::kBytes);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) isum[r][t] = _mm512_setzero_si512();
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512i q[R], s[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          q[r] = blk[r].quants(c);
          s[r] = blk[r].scale16(c);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m512i xq = _mm512_loadu_si512(xb[t]->qs + 64 * c);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) isum[r][t] = _mm512_dpwssd_epi32(isum[r][t], _mm512_maddubs_epi16(q[r], xq), s[r]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i offset16 = blk[r].offset16();
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i off = _mm256_madd_epi16(offset16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[t]->bsums)));
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][t]), _mm512_set1_ps(xb[t]->d * blk[r].d), acc[r][t]);
          acc[r][t] = _mm512_fmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(off)),
                                      _mm512_set1_ps(-(xb[t]->d * blk[r].dc)), acc[r][t]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) y[t * ldy + o[r]] = hsum(acc[r][t]);
  }
  if constexpr (R > 1) {
    if (o_begin + R * slice < o_end) rows_kquant<Fmt, NT, 1>(w, x, o_begin + R * slice, o_end, y, ldy);
  }
}

template <int NT>
void rows_tile(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  constexpr int R = kRows(NT);
  switch (w.dtype) {
    case DType::kQ4_K:
      return rows_kquant<Q4K, NT, R>(w, x, o_begin, o_end, y, ldy);
    case DType::kQ5_K:
      return rows_kquant<Q5K, NT, R>(w, x, o_begin, o_end, y, ldy);
    case DType::kQ6_K:
      return rows_kquant<Q6K, NT, R>(w, x, o_begin, o_end, y, ldy);
    default:
      CHECK(false) << "k-quant kernel asked for " << dtype_name(w.dtype);
  }
}

}  // namespace

void decode_rows_kquant_avx512(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                               int64_t ldy) {
  static_assert(kMaxTile >= Matmul::kBlasMinTokens - 1);
  switch (x.n_tokens) {
    case 1: return rows_tile<1>(w, x, o_begin, o_end, y, ldy);
    case 2: return rows_tile<2>(w, x, o_begin, o_end, y, ldy);
    case 3: return rows_tile<3>(w, x, o_begin, o_end, y, ldy);
    case 4: return rows_tile<4>(w, x, o_begin, o_end, y, ldy);
    case 5: return rows_tile<5>(w, x, o_begin, o_end, y, ldy);
    case 6: return rows_tile<6>(w, x, o_begin, o_end, y, ldy);
    case 7: return rows_tile<7>(w, x, o_begin, o_end, y, ldy);
    default: CHECK(false) << x.n_tokens << " tokens in one k-quant decode call";
  }
}

}  // namespace pagoda::kernels::detail
