// k-quant decode kernels for AVX2 + FMA + F16C: Q4_K / Q5_K / Q6_K weight rows against Q8_K
// activations, on 256-bit vectors (matmul_kquant_avx512.cpp does the same on 512-bit ones).
//
// Per super-block of a row, each 32-value group k (a Q4_K/Q5_K sub-block, or two Q6_K
// sub-blocks of 16) is unpacked once to unsigned bytes q (0..15 / 0..31 / 0..63) and dotted
// with every token's 32 x quants: maddubs (u8 x s8 -> pairs in i16; |pair| <= 2 * 63 * 127, no
// saturation), then madd with the group's scale in i16 lanes into i32. Per super-block and token:
//   acc += f32(i32 sum) * (x.d * d)  -  f32(madd(offset weights, x.bsums)) * (x.d * dc)
// where the offset term is sum_j m[j] * xsum_j (Q4_K/Q5_K, dc = dmin) or 32 * sum_j sc[j] *
// xsum_j (Q6_K's q - 32, dc = d). Integer parts are exact (|lane| < 2^24), so this equals
// dot_kquant_q8k (kernels/kquant.h) up to float rounding. Up to 4 tokens per pass (16 ymm
// registers); larger batches run their tiles over 16 rows at a time.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/matmul_isa.h"

namespace pagoda::kernels::detail {

namespace {

constexpr int kMaxTile = 4;
constexpr int kRows(int n_tokens) { return n_tokens <= 2 ? 2 : 1; }
inline __m256i accumulate(__m256i acc, __m256i pairs, __m256i scales) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Q4_K / Q5_K: 6-bit scales and mins, unpacked to bytes.
struct Q45Scales {
  uint64_t sc, m;  // byte j: scale / min of sub-block j
  void init(const uint8_t* packed) { unpack_kquant_scales_u64(packed, &sc, &m); }
  __m256i scale16(int k) const { return _mm256_set1_epi16(static_cast<int16_t>((sc >> (8 * k)) & 0xff)); }
  // Offset weights per bsum i (16 values each): m[i / 2].
  __m256i offset16() const {
    const __m128i mv = _mm_cvtsi64_si128(static_cast<int64_t>(m));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
  }
};

struct Q4K {
  static constexpr int kBytes = sizeof(BlockQ4_K);
  const BlockQ4_K* blk;
  Q45Scales scales;
  float d, dc;
  void init(const uint8_t* p) {
    blk = reinterpret_cast<const BlockQ4_K*>(p);
    scales.init(blk->scales);
    d = f16(blk->d);
    dc = f16(blk->dmin);
  }
  __m256i quants(int k) const {
    const __m256i raw = load256(blk->qs + 32 * (k / 2));
    return _mm256_and_si256(k % 2 == 0 ? raw : _mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
  }
  __m256i scale16(int k) const { return scales.scale16(k); }
  __m256i offset16() const { return scales.offset16(); }
};

struct Q5K {
  static constexpr int kBytes = sizeof(BlockQ5_K);
  const BlockQ5_K* blk;
  Q45Scales scales;
  float d, dc;
  __m256i qh;
  void init(const uint8_t* p) {
    blk = reinterpret_cast<const BlockQ5_K*>(p);
    scales.init(blk->scales);
    d = f16(blk->d);
    dc = f16(blk->dmin);
    qh = load256(blk->qh);
  }
  __m256i quants(int k) const {
    const __m256i raw = load256(blk->qs + 32 * (k / 2));
    const __m256i low = _mm256_and_si256(k % 2 == 0 ? raw : _mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
    // Bit k of each qh byte, moved to bit 4 (16-bit shifts: the spill-over bits are masked off).
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1));
    return _mm256_or_si256(low, _mm256_slli_epi16(bit, 4));
  }
  __m256i scale16(int k) const { return scales.scale16(k); }
  __m256i offset16() const { return scales.offset16(); }
};

struct Q6K {
  static constexpr int kBytes = sizeof(BlockQ6_K);
  const BlockQ6_K* blk;
  float d, dc;
  void init(const uint8_t* p) {
    blk = reinterpret_cast<const BlockQ6_K*>(p);
    d = dc = f16(blk->d);
  }
  // Group k = 4 * half + g covers values 128 half + 32 g .. + 31.
  __m256i quants(int k) const {
    const int half = k / 4, g = k % 4;
    const __m256i raw = load256(blk->ql + 64 * half + (g % 2) * 32);
    const __m256i low = _mm256_and_si256(g < 2 ? raw : _mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
    const __m256i hbits = load256(blk->qh + 32 * half);
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * g), _mm256_set1_epi8(3));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
  // Lanes 0..7 (values 0..15 of the group) scale 2k, lanes 8..15 scale 2k + 1.
  __m256i scale16(int k) const {
    return _mm256_setr_m128i(_mm_set1_epi16(blk->scales[2 * k]), _mm_set1_epi16(blk->scales[2 * k + 1]));
  }
  // 32 * scale per bsum (|.| <= 4096).
  __m256i offset16() const {
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
    return _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5);
  }
};

// R rows (from R equal contiguous slices of [o_begin, o_end): R sequential streams) x NT
// tokens per pass; each weight group is unpacked once for all NT tokens.
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
    __m256 acc[R][NT];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      o[r] = o_begin + r * slice + j;
      rows[r] = base + o[r] * row_bytes;
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_K* xb[NT];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) xb[t] = x.q8k + t * nb + b;
      __m256i isum[R][NT];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) isum[r][t] = _mm256_setzero_si256();
      Fmt blk[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) blk[r].init(rows[r] + b * Fmt::kBytes);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m256i q[R], s[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          q[r] = blk[r].quants(k);
          s[r] = blk[r].scale16(k);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i xq = load256(xb[t]->qs + 32 * k);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) isum[r][t] = accumulate(isum[r][t], _mm256_maddubs_epi16(q[r], xq), s[r]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const Fmt& f = blk[r];
        const __m256i offset16 = f.offset16();
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i off = _mm256_madd_epi16(offset16, load256(xb[t]->bsums));
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(xb[t]->d * f.d), acc[r][t]);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_set1_ps(-(xb[t]->d * f.dc)), acc[r][t]);
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

// One pass of up to kMaxTile tokens over [o_begin, o_end).
void decode_tile(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  static_assert(kMaxTile == 4);
  switch (x.n_tokens) {
    case 1: return rows_tile<1>(w, x, o_begin, o_end, y, ldy);
    case 2: return rows_tile<2>(w, x, o_begin, o_end, y, ldy);
    case 3: return rows_tile<3>(w, x, o_begin, o_end, y, ldy);
    case 4: return rows_tile<4>(w, x, o_begin, o_end, y, ldy);
    default: CHECK(false) << x.n_tokens << " tokens in one k-quant tile";
  }
}

// More than kMaxTile tokens: every tile runs over a few rows at a time, so each weight row
// comes from memory once (and from cache for the later tiles).
}  // namespace

void decode_rows_kquant_avx2(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                             int64_t ldy) {
  if (x.n_tokens <= kMaxTile) return decode_tile(w, x, o_begin, o_end, y, ldy);
  constexpr int64_t kRowsPerChunk = 16;
  const int64_t nb = x.n_in / kQK_K;
  for (int64_t o = o_begin; o < o_end; o += kRowsPerChunk) {
    for (int64_t t0 = 0; t0 < x.n_tokens; t0 += kMaxTile) {
      DecodeX tile = x;
      tile.n_tokens = std::min<int64_t>(kMaxTile, x.n_tokens - t0);
      tile.q8k = x.q8k + t0 * nb;
      decode_tile(w, tile, o, std::min(o + kRowsPerChunk, o_end), y + t0 * ldy, ldy);
    }
  }
}

}  // namespace pagoda::kernels::detail

// ---- dequantization for the prefill (sgemm) path, bit-identical to dequantize_row_kquant ----
// (this file is compiled with -ffp-contract=off: (d * sc) * q - dmin * m stays two roundings)

namespace pagoda::kernels::detail {

namespace {

// 32 unsigned bytes -> 32 floats at out (4 x 8).
inline void store_scaled(__m256i q8, __m256 scale, __m256 offset, float* out) {
  const __m128i lo = _mm256_castsi256_si128(q8), hi = _mm256_extracti128_si256(q8, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
    _mm256_storeu_ps(out + 8 * k, _mm256_sub_ps(_mm256_mul_ps(scale, v), offset));
  }
}

void dequantize_q4k_row(const BlockQ4_K* blocks, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, out += kQK_K) {
    const BlockQ4_K& blk = blocks[b];
    const float d = f16(blk.d), dmin = f16(blk.dmin);
    uint8_t sc[8], m[8];
    unpack_kquant_scales(blk.scales, sc, m);
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load256(blk.qs + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, _mm256_set1_epi8(15));
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
      store_scaled(lo, _mm256_set1_ps(d * static_cast<float>(sc[2 * c])),
                   _mm256_set1_ps(dmin * static_cast<float>(m[2 * c])), out + 64 * c);
      store_scaled(hi, _mm256_set1_ps(d * static_cast<float>(sc[2 * c + 1])),
                   _mm256_set1_ps(dmin * static_cast<float>(m[2 * c + 1])), out + 64 * c + 32);
    }
  }
}

// Q6_K: values v of a group of 32 hold q - 32 with scales changing every 16.
void dequantize_q6k_row(const BlockQ6_K* blocks, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, out += kQK_K) {
    const BlockQ6_K& blk = blocks[b];
    const float d = f16(blk.d);
    Q6K fmt;
    fmt.init(reinterpret_cast<const uint8_t*>(&blk));
    for (int k = 0; k < 8; ++k) {
      const __m256i q = fmt.quants(k);  // 0..63, value order within the group
      alignas(32) int8_t v[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(v), _mm256_sub_epi8(q, _mm256_set1_epi8(32)));
      for (int half = 0; half < 2; ++half) {
        const __m256 scale = _mm256_set1_ps(d * static_cast<float>(blk.scales[2 * k + half]));
        for (int p = 0; p < 2; ++p) {
          const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + 16 * half + 8 * p));
          const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
          _mm256_storeu_ps(out + 32 * k + 16 * half + 8 * p, _mm256_mul_ps(scale, x));
        }
      }
    }
  }
}

}  // namespace

void dequantize_rows_kquant_avx2(const WeightView& w, int64_t o_begin, int64_t n_rows, float* dst) {
  const int64_t nb = w.n_in / kQK_K;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w.row(o_begin + r);
    float* out = dst + r * w.n_in;
    switch (w.dtype) {
      case DType::kQ4_K:
        dequantize_q4k_row(reinterpret_cast<const BlockQ4_K*>(row), nb, out);
        break;
      case DType::kQ6_K:
        dequantize_q6k_row(reinterpret_cast<const BlockQ6_K*>(row), nb, out);
        break;
      default:
        dequantize_row_kquant(w.dtype, row, out, w.n_in);
    }
  }
}

}  // namespace pagoda::kernels::detail
