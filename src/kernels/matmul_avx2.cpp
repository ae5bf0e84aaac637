// AVX2 + FMA + F16C matmul kernels (compiled with -mavx2 -mfma -mf16c; run only when
// detect_isa() says so). Decode rows are processed a tile of up to kTile tokens at a time so
// one read of a weight block (and its unpacking) serves every token of the tile; larger
// batches run all their tiles over 16 rows at a time, so weights still come from DRAM once.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_isa.h"
#include "kernels/quant.h"

namespace pagoda::kernels::detail {

namespace {

constexpr int kTile = 4;  // tokens per pass over a row (16 ymm registers bound this)

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half_to_float(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// ---- F32 / F16 / BF16: 8 weights per load, converted to f32 once for every token ----

struct LoadF32 {
  static __m256 load(const uint8_t* row, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static float scalar(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
};
struct LoadF16 {
  static __m256 load(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
  static float scalar(const uint8_t* row, int64_t i) { return half_to_float(row + 2 * i); }
};
struct LoadBF16 {
  static __m256 load(const uint8_t* row, int64_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float scalar(const uint8_t* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return bf16_to_fp32(h);
  }
};

// R rows x NT tokens per pass, the R rows taken from R equal contiguous slices of
// [o_begin, o_end) (R long sequential streams pull more DRAM bandwidth than one); U
// accumulators per (row, token) hide the FMA latency.
template <int NT, int R, int U, typename Load>
__attribute__((noinline)) void rows_float(const WeightView& w, const float* x, int64_t o_begin, int64_t o_end,
                                          float* y, int64_t ldy) {
  const int64_t n = w.n_in;
  const size_t row_bytes = w.row_bytes();
  const int64_t slice = (o_end - o_begin) / R;
  for (int64_t j = 0; j < slice; ++j) {
    int64_t o[R];
    const uint8_t* rows[R];
    __m256 acc[R][NT][U];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      o[r] = o_begin + r * slice + j;
      rows[r] = static_cast<const uint8_t*>(w.data) + o[r] * row_bytes;
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) acc[r][t][u] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 * U <= n; i += 8 * U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        __m256 wv[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) wv[r] = Load::load(rows[r], i + 8 * u);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m256 xv = _mm256_loadu_ps(x + t * n + i + 8 * u);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) acc[r][t][u] = _mm256_fmadd_ps(wv[r], xv, acc[r][t][u]);
        }
      }
    }
    for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 wv = Load::load(rows[r], i);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) acc[r][t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * n + i), acc[r][t][0]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        __m256 sum = acc[r][t][0];
#pragma GCC unroll 4
        for (int u = 1; u < U; ++u) sum = _mm256_add_ps(sum, acc[r][t][u]);
        float total = hsum(sum);
        for (int64_t k = i; k < n; ++k) total += Load::scalar(rows[r], k) * x[t * n + k];
        y[t * ldy + o[r]] = total;
      }
  }
  if constexpr (R > 1) {
    if (o_begin + R * slice < o_end) rows_float<NT, 1, U, Load>(w, x, o_begin + R * slice, o_end, y, ldy);
  }
}

// ---- Q8_0 / Q4_0 weights against Q8_0 x ----
//
// Q4_0: unsigned nibbles q (0..15) times signed x with maddubs; sum (q - 8) x = sum q x - 8 sum x,
//   the second term taken from x's precomputed d * sum(qs) (DecodeX::ds).
// Q8_0: the sign trick: |w| (unsigned) times x * sign(w).

struct Q4Block {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr float kOffset = 8.0f;
  __m256i q;
  explicit Q4Block(const uint8_t* blk) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
    q = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));  // values 0..15 | values 16..31
  }
  __m256i dot(__m256i xq) const {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), _mm256_set1_epi16(1));
  }
};

struct Q8Block {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr float kOffset = 0.0f;
  __m256i q, aq;
  explicit Q8Block(const uint8_t* blk) {
    q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    aq = _mm256_abs_epi8(q);
  }
  // |w| <= 128 and |x| <= 127, so the int16 pair sums of maddubs cannot saturate.
  __m256i dot(__m256i xq) const {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(xq, q)), _mm256_set1_epi16(1));
  }
};

// R rows (from R slices, as rows_float) x NT tokens x U blocks per step.
template <int NT, int R, int U, typename Block>
__attribute__((noinline)) void rows_quant(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end,
                                          float* y, int64_t ldy) {
  const int64_t n = w.n_in;
  const int64_t nb = n / kQK;
  const size_t row_bytes = w.row_bytes();
  const int64_t slice = (o_end - o_begin) / R;
  for (int64_t j = 0; j < slice; ++j) {
    int64_t o[R];
    const uint8_t* rows[R];
    __m256 acc[R][NT][U];
    __m128 corr[R];  // lane t: sum over blocks of d_w * d_x * sum(x quants) for token t
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      o[r] = o_begin + r * slice + j;
      rows[r] = static_cast<const uint8_t*>(w.data) + o[r] * row_bytes;
      corr[r] = _mm_setzero_ps();
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) acc[r][t][u] = _mm256_setzero_ps();
    }
    auto step = [&](int64_t b, int u) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = rows[r] + b * Block::kBytes;
        const Block wb(blk);
        const __m256 dw = _mm256_set1_ps(half_to_float(blk));
        if (Block::kOffset != 0.0f)
          corr[r] = _mm_fmadd_ps(_mm256_castps256_ps128(dw), _mm_loadu_ps(x.ds + b * kDecodeLanes), corr[r]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + t * n + b * kQK));
          const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[b * kDecodeLanes + t]));
          acc[r][t][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(wb.dot(xq)), scale, acc[r][t][u]);
        }
      }
    };
    int64_t b = 0;
    for (; b + U <= nb; b += U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) step(b + u, u);
    }
    for (; b < nb; ++b) step(b, 0);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      alignas(16) float corr_lanes[4];
      _mm_store_ps(corr_lanes, corr[r]);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        __m256 sum = acc[r][t][0];
#pragma GCC unroll 4
        for (int u = 1; u < U; ++u) sum = _mm256_add_ps(sum, acc[r][t][u]);
        y[t * ldy + o[r]] = hsum(sum) - Block::kOffset * corr_lanes[t];
      }
    }
  }
  if constexpr (R > 1) {
    if (o_begin + R * slice < o_end) rows_quant<NT, 1, U, Block>(w, x, o_begin + R * slice, o_end, y, ldy);
  }
}

template <int NT>
void rows_tile(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  constexpr int R = NT <= 2 ? 2 : 1;  // rows per pass
  constexpr int U = NT == 1 ? 2 : 1;  // accumulators per (row, token)
  switch (w.dtype) {
    case DType::kF32:
      return rows_float<NT, R, U, LoadF32>(w, x.f32, o_begin, o_end, y, ldy);
    case DType::kF16:
      return rows_float<NT, R, U, LoadF16>(w, x.f32, o_begin, o_end, y, ldy);
    case DType::kBF16:
      return rows_float<NT, R, U, LoadBF16>(w, x.f32, o_begin, o_end, y, ldy);
    case DType::kQ8_0:
      return rows_quant<NT, R, U, Q8Block>(w, x, o_begin, o_end, y, ldy);
    case DType::kQ4_0:
      return rows_quant<NT, R, U, Q4Block>(w, x, o_begin, o_end, y, ldy);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return;  // decode_rows sends these to decode_rows_kquant_avx2
  }
}

void decode_tiles(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  for (int64_t t0 = 0; t0 < x.n_tokens; t0 += kTile) {
    DecodeX tile = x;
    tile.n_tokens = std::min<int64_t>(kTile, x.n_tokens - t0);
    if (x.f32) tile.f32 = x.f32 + t0 * x.n_in;
    if (x.qs) {
      tile.qs = x.qs + t0 * x.n_in;
      tile.d = x.d + t0;
      tile.ds = x.ds + t0;
    }
    float* yt = y + t0 * ldy;
    switch (tile.n_tokens) {
      case 1: rows_tile<1>(w, tile, o_begin, o_end, yt, ldy); break;
      case 2: rows_tile<2>(w, tile, o_begin, o_end, yt, ldy); break;
      case 3: rows_tile<3>(w, tile, o_begin, o_end, yt, ldy); break;
      default: rows_tile<4>(w, tile, o_begin, o_end, yt, ldy); break;
    }
  }
}

// More than kTile tokens: all tiles run over a few rows at a time, so that each weight row is
// read from memory once (and from cache for the later tiles).
void decode_rows(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  if (is_kquant(w.dtype)) return decode_rows_kquant_avx2(w, x, o_begin, o_end, y, ldy);
  if (x.n_tokens <= kTile) return decode_tiles(w, x, o_begin, o_end, y, ldy);
  constexpr int64_t kRowsPerChunk = 16;
  for (int64_t o = o_begin; o < o_end; o += kRowsPerChunk) {
    decode_tiles(w, x, o, std::min(o + kRowsPerChunk, o_end), y, ldy);
  }
}

// ---- x -> Q8_0, bit-identical to quantize_row(kQ8_0) ----

// roundf (ties away from zero) of |v| < 2^22.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
}

void quantize_x(const float* x, int64_t n, int8_t* qs, float* d, float* ds, int64_t lane_stride) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / kQK; ++b) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + b * kQK + 8 * k);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    const float dq = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    // packs interleave 128-bit lanes; restore value order afterwards.
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * kQK), p);
    d[b * lane_stride] = dq;
    ds[b * lane_stride] = dq * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

}  // namespace

// ---- dequantization for the sgemm path ----

void dequantize_rows_avx2(const WeightView& w, int64_t o_begin, int64_t n_rows, float* dst) {
  const int64_t n = w.n_in;
  if (is_kquant(w.dtype)) return dequantize_rows_kquant_avx2(w, o_begin, n_rows, dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w.row(o_begin + r);
    float* out = dst + r * n;
    int64_t i = 0;
    switch (w.dtype) {
      case DType::kF32:
        std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
        break;
      case DType::kF16:
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadF16::load(row, i));
        for (; i < n; ++i) out[i] = LoadF16::scalar(row, i);
        break;
      case DType::kBF16:
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadBF16::load(row, i));
        for (; i < n; ++i) out[i] = LoadBF16::scalar(row, i);
        break;
      case DType::kQ8_0:
        for (int64_t b = 0; b < n / kQK; ++b) {
          const uint8_t* blk = row + b * sizeof(BlockQ8_0);
          const __m256 d = _mm256_set1_ps(half_to_float(blk));
          for (int k = 0; k < 4; ++k) {
            const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k));
            _mm256_storeu_ps(out + b * kQK + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
          }
        }
        break;
      case DType::kQ4_0:
        for (int64_t b = 0; b < n / kQK; ++b) {
          const uint8_t* blk = row + b * sizeof(BlockQ4_0);
          const __m256 d = _mm256_set1_ps(half_to_float(blk));
          const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, _mm_set1_epi8(15)), _mm_set1_epi8(8));
          const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)), _mm_set1_epi8(8));
          const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
          for (int k = 0; k < 4; ++k) {
            _mm256_storeu_ps(out + b * kQK + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k]))));
          }
        }
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ6_K:
        break;  // handled above
    }
  }
}

const MatmulKernels& matmul_kernels_avx2() {
  static constexpr MatmulKernels kTable = {quantize_x, [](int64_t, int64_t) -> size_t { return 0; }, nullptr,
                                           decode_rows, dequantize_rows_avx2};
  return kTable;
}

}  // namespace pagoda::kernels::detail
