// AVX-512 (F, BW, VL, DQ, VNNI) matmul kernels; run only when detect_isa() says so.
// Float weights use 512-bit FMA (masked loads for row tails); quantized weights use VNNI
// vpdpbusd on one 32-value block per ymm. Decode rows handle up to 7 tokens per pass, so
// each weight block is read and unpacked once for the whole decode batch.
#include <immintrin.h>

// GCC 12's AVX-512 headers start several intrinsics from _mm512_undefined_*(), which trips
// -Wmaybe-uninitialized at -O2 (a false positive inside the system header).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "kernels/matmul_isa.h"
#include "kernels/quant.h"

namespace pagoda::kernels::detail {

namespace {

constexpr int kTile = kDecodeLanes - 1;  // every decode batch in one pass

// With several tokens per weight read the kernels consume weights slowly enough that the
// hardware prefetchers fall behind (measured: up to 1.6x slower than from cache); from
// kPrefetchMinTokens tokens on, each row stream is prefetched kPrefetchAhead bytes ahead.
constexpr int kPrefetchMinTokens = 4;
constexpr int kPrefetchAhead = 1024;

// ---- F32 / F16 / BF16 ----

struct LoadF32 {
  static const void* address(const uint8_t* row, int64_t i) { return row + 4 * i; }
  static __m512 load(const uint8_t* row, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
  }
};
struct LoadF16 {
  static const void* address(const uint8_t* row, int64_t i) { return row + 2 * i; }
  static __m512 load(const uint8_t* row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
  static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
  }
};
struct LoadBF16 {
  static const void* address(const uint8_t* row, int64_t i) { return row + 2 * i; }
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint8_t* row, int64_t i) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
  static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, row + 2 * i)); }
};

// R rows x NT tokens per pass, the R rows taken from R equal contiguous slices of
// [o_begin, o_end) so that each is a long sequential stream (more streams in flight pull more
// DRAM bandwidth than one); U accumulators per (row, token) hide the FMA latency.
template <int NT, int R, int U, typename Load>
__attribute__((noinline)) void rows_float(const WeightView& w, const float* x, int64_t o_begin, int64_t o_end,
                                          float* y, int64_t ldy) {
  const int64_t n = w.n_in;
  const size_t row_bytes = w.row_bytes();
  const int64_t slice = (o_end - o_begin) / R;
  for (int64_t j = 0; j < slice; ++j) {
    int64_t o[R];
    const uint8_t* rows[R];
    __m512 acc[R][NT][U];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      o[r] = o_begin + r * slice + j;
      rows[r] = static_cast<const uint8_t*>(w.data) + o[r] * row_bytes;
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) acc[r][t][u] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 * U <= n; i += 16 * U) {
      if constexpr (NT >= kPrefetchMinTokens) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(Load::address(rows[r], i)) + kPrefetchAhead, _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        __m512 wv[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) wv[r] = Load::load(rows[r], i + 16 * u);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m512 xv = _mm512_loadu_ps(x + t * n + i + 16 * u);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) acc[r][t][u] = _mm512_fmadd_ps(wv[r], xv, acc[r][t][u]);
        }
      }
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 wv = Load::load(rows[r], i, m);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) acc[r][t][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + t * n + i), acc[r][t][0]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        __m512 sum = acc[r][t][0];
#pragma GCC unroll 4
        for (int u = 1; u < U; ++u) sum = _mm512_add_ps(sum, acc[r][t][u]);
        y[t * ldy + o[r]] = _mm512_reduce_add_ps(sum);
      }
  }
  if constexpr (R > 1) {
    if (o_begin + R * slice < o_end) rows_float<NT, 1, U, Load>(w, x, o_begin + R * slice, o_end, y, ldy);
  }
}

// ---- Q8_0 / Q4_0 weights against Q8_0 x, with vpdpbusd (unsigned bytes x signed bytes) ----
//
// vpdpbusd wants unsigned weights, so each format is read with an offset:
//   Q8_0: u = w ^ 0x80 = w + 128 (0..255).
//   Q4_0: one 16-byte load broadcast to both halves and masked: the low half (0x0F) holds
//         q = w + 8 of values 0..15, the high half (0xF0) 16 q of values 16..31 (no shift). The
//         high lanes so accumulate 16 times their value and are scaled by 1/16 (exact) at the end.
// Per block, dot = vpdpbusd(0, u, x) over 8 int32 lanes is converted to f32 and accumulated
// times d_w * d_x; the offset's share, -off * d_w * d_x * sum(x quants), goes into the same
// accumulator 8 blocks per FMA: acc += d_w[8 blocks] * k[8 blocks], k = -off * d_x * sum(x)
// (times 16 in the high lanes of Q4_0, undoing the final 1/16).
// d_w of 8 blocks come from one vpermt2w per row; d_w * d_x go through a small stack array
// from which each block broadcast-loads its scale (a load, no shuffle).

// DecodeX::extra for n_tokens x n_in, both [n_tokens, nb_pad] f32 (nb_pad: nb rounded up to 8):
//   dx  x's block scales, contiguous per token
//   k   -off * dx * sum(block quants), the offset correction per block
struct XExtra {
  int64_t nb, nb_pad;
  float* dx;
  float* k;
  XExtra(const void* extra, int64_t n_tokens, int64_t n_in)
      : nb(n_in / kQK), nb_pad((n_in / kQK + 7) / 8 * 8),
        dx(static_cast<float*>(const_cast<void*>(extra))), k(dx + n_tokens * nb_pad) {}
  size_t bytes(int64_t n_tokens) const { return static_cast<size_t>(2 * n_tokens * nb_pad) * sizeof(float); }
};

size_t extra_bytes(int64_t n_tokens, int64_t n_in) { return XExtra(nullptr, n_tokens, n_in).bytes(n_tokens); }

void prepare_extra(DType dtype, const DecodeX& x, void* extra) {
  const XExtra xe(extra, x.n_tokens, x.n_in);
  const float off = dtype == DType::kQ4_0 ? 8.0f : 128.0f;
  for (int64_t t = 0; t < x.n_tokens; ++t) {
    for (int64_t b = 0; b < xe.nb_pad; ++b) {
      const bool real = b < xe.nb;
      xe.dx[t * xe.nb_pad + b] = real ? x.d[b * kDecodeLanes + t] : 0.0f;
      xe.k[t * xe.nb_pad + b] = real ? -off * x.ds[b * kDecodeLanes + t] : 0.0f;
    }
  }
}

alignas(64) constexpr int16_t kQ4ScaleWords[32] = {0, 9, 18, 27, 36, 45, 54, 63};  // block k: word 9k
alignas(64) constexpr int16_t kQ8ScaleWordsLo[32] = {0, 17, 34, 51};                // word 17k, k < 4
alignas(64) constexpr int16_t kQ8ScaleWordsHi[32] = {0, 0, 0, 0, 4, 21, 38, 55};    // k >= 4, from word 64

struct Q4Block {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static __m256i unpack(const uint8_t* blk) {
    const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m256i mask = _mm256_setr_epi64x(0x0f0f0f0f0f0f0f0f, 0x0f0f0f0f0f0f0f0f,
                                            static_cast<int64_t>(0xf0f0f0f0f0f0f0f0ull),
                                            static_cast<int64_t>(0xf0f0f0f0f0f0f0f0ull));
    return _mm256_and_si256(raw, mask);
  }
  // f32 scales of the 8 blocks starting at `blk` (8 * 18 bytes, all inside the row).
  static __m256 scales8(const uint8_t* blk) {
    const __m512i words = _mm512_permutex2var_epi16(_mm512_loadu_si512(blk), _mm512_load_si512(kQ4ScaleWords),
                                                    _mm512_loadu_si512(blk + 64));
    return _mm256_cvtph_ps(_mm512_castsi512_si128(words));
  }
  static __m256 lane_weights() { return _mm256_setr_ps(1, 1, 1, 1, 0.0625f, 0.0625f, 0.0625f, 0.0625f); }
  static __m256 inverse_lane_weights() { return _mm256_setr_ps(1, 1, 1, 1, 16, 16, 16, 16); }
};

struct Q8Block {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static __m256i unpack(const uint8_t* blk) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), _mm256_set1_epi8(-128));
  }
  // 8 * 34 = 272 bytes: words 17k of [0, 64) give blocks 0..3, of [64, 128) blocks 4..7.
  static __m256 scales8(const uint8_t* blk) {
    const __m512i lo = _mm512_permutex2var_epi16(_mm512_loadu_si512(blk), _mm512_load_si512(kQ8ScaleWordsLo),
                                                 _mm512_loadu_si512(blk + 64));
    const __m512i hi = _mm512_permutex2var_epi16(_mm512_loadu_si512(blk + 128), _mm512_load_si512(kQ8ScaleWordsHi),
                                                 _mm512_loadu_si512(blk + 192));
    return _mm256_cvtph_ps(_mm_blend_epi32(_mm512_castsi512_si128(lo), _mm512_castsi512_si128(hi), 0b1100));
  }
  static __m256 lane_weights() { return _mm256_set1_ps(1.0f); }
  static __m256 inverse_lane_weights() { return _mm256_set1_ps(1.0f); }
};

inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

// R rows x NT tokens per pass: each x block is loaded once for R rows, each weight block once
// for NT tokens; R * NT independent accumulators hide the FMA latency. The R rows of a pass
// come from R equal contiguous slices of [o_begin, o_end), i.e. R long sequential streams
// (R adjacent rows read block-interleaved defeat the hardware prefetchers: half the bandwidth).
template <int NT, int R, typename Block>
__attribute__((noinline)) void rows_quant(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end,
                                          float* y, int64_t ldy) {
  const int64_t n = w.n_in;
  const XExtra xe(x.extra, x.n_tokens, n);
  const int64_t nb = xe.nb;
  const size_t row_bytes = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t slice = (o_end - o_begin) / R;
  for (int64_t i = 0; i < slice; ++i) {
    int64_t o[R];
    const uint8_t* rows[R];
    __m256 acc[R][NT];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      o[r] = o_begin + r * slice + i;
      rows[r] = base + o[r] * row_bytes;
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    // One block: acc[r][t] += f32(dot(r, t)) * scale(r, t).
    auto block = [&](int64_t b, auto scale) {
      __m256i q[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) q[r] = Block::unpack(rows[r] + b * Block::kBytes);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + t * n + b * kQK));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q[r], xq);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale(r, t), acc[r][t]);
        }
      }
    };
    int64_t b = 0;
    alignas(32) float s[R][NT][8];  // d_w * d_x of the current 8 blocks
    for (; b + 8 <= nb; b += 8) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 dw = Block::scales8(rows[r] + b * Block::kBytes);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          _mm256_store_ps(s[r][t], _mm256_mul_ps(dw, _mm256_loadu_ps(xe.dx + t * xe.nb_pad + b)));
          const __m256 k = _mm256_mul_ps(_mm256_loadu_ps(xe.k + t * xe.nb_pad + b), Block::inverse_lane_weights());
          acc[r][t] = _mm256_fmadd_ps(dw, k, acc[r][t]);
        }
      }
      if constexpr (NT >= kPrefetchMinTokens) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const char* ahead = reinterpret_cast<const char*>(rows[r] + b * Block::kBytes) + kPrefetchAhead;
#pragma GCC unroll 8
          for (int l = 0; l < 8 * Block::kBytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        }
      }
      const float* sp = &s[0][0][0];
      asm("" : "+r"(sp));  // sp + constant addressing below (GCC otherwise hoists 8 R NT pointers)
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) block(b + k, [&](int r, int t) { return _mm256_broadcast_ss(sp + (r * NT + t) * 8 + k); });
    }
    for (; b < nb; ++b) {  // the last nb % 8 blocks
      __m256 dw[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        int16_t bits;
        std::memcpy(&bits, rows[r] + b * Block::kBytes, 2);
        dw[r] = _mm256_cvtph_ps(_mm_set1_epi16(bits));
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256 k = _mm256_setr_ps(xe.k[t * xe.nb_pad + b], 0, 0, 0, 0, 0, 0, 0);
          acc[r][t] = _mm256_fmadd_ps(dw[r], k, acc[r][t]);
        }
      }
      block(b, [&](int r, int t) { return _mm256_mul_ps(dw[r], _mm256_broadcast_ss(xe.dx + t * xe.nb_pad + b)); });
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        y[t * ldy + o[r]] = hsum(_mm256_mul_ps(acc[r][t], Block::lane_weights()));
      }
  }
  if constexpr (R > 1) {
    if (o_begin + R * slice < o_end) rows_quant<NT, 1, Block>(w, x, o_begin + R * slice, o_end, y, ldy);
  }
}

template <int NT>
void rows_tile(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  // Rows per pass: R * NT accumulators (of 32 registers); each x load serves R rows, which
  // matters from a few tokens on, when x no longer fits in L1 (7 x 4096 f32 = 112 KB).
  constexpr int R = NT <= 5 ? 4 : 3;
  constexpr int U = NT == 1 ? 2 : 1;  // accumulators per (row, token), float kernels
  switch (w.dtype) {
    case DType::kF32:
      return rows_float<NT, R, U, LoadF32>(w, x.f32, o_begin, o_end, y, ldy);
    case DType::kF16:
      return rows_float<NT, R, U, LoadF16>(w, x.f32, o_begin, o_end, y, ldy);
    case DType::kBF16:
      return rows_float<NT, R, U, LoadBF16>(w, x.f32, o_begin, o_end, y, ldy);
    case DType::kQ8_0:
      return rows_quant<NT, R, Q8Block>(w, x, o_begin, o_end, y, ldy);
    case DType::kQ4_0:
      return rows_quant<NT, R, Q4Block>(w, x, o_begin, o_end, y, ldy);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return;  // decode_rows sends these to decode_rows_kquant_avx512
  }
}

void decode_rows(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  static_assert(kTile >= Matmul::kBlasMinTokens - 1);
  if (is_kquant(w.dtype)) return decode_rows_kquant_avx512(w, x, o_begin, o_end, y, ldy);
  switch (x.n_tokens) {
    case 1: return rows_tile<1>(w, x, o_begin, o_end, y, ldy);
    case 2: return rows_tile<2>(w, x, o_begin, o_end, y, ldy);
    case 3: return rows_tile<3>(w, x, o_begin, o_end, y, ldy);
    case 4: return rows_tile<4>(w, x, o_begin, o_end, y, ldy);
    case 5: return rows_tile<5>(w, x, o_begin, o_end, y, ldy);
    case 6: return rows_tile<6>(w, x, o_begin, o_end, y, ldy);
    default: return rows_tile<7>(w, x, o_begin, o_end, y, ldy);
  }
}

// ---- x -> Q8_0, bit-identical to quantize_row(kQ8_0) ----

// roundf (ties away from zero) of |v| < 2^22.
inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, up, t, one);
}

void quantize_x(const float* x, int64_t n, int8_t* qs, float* d, float* ds, int64_t lane_stride) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * kQK);
    const __m512 v1 = _mm512_loadu_ps(x + b * kQK + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    const float dq = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
    const __m512i q0 = _mm512_cvtps_epi32(round_half_away(_mm512_mul_ps(v0, _mm512_set1_ps(id))));
    const __m512i q1 = _mm512_cvtps_epi32(round_half_away(_mm512_mul_ps(v1, _mm512_set1_ps(id))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * kQK), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * kQK + 16), _mm512_cvtepi32_epi8(q1));
    d[b * lane_stride] = dq;
    ds[b * lane_stride] = dq * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static constexpr MatmulKernels kTable = {quantize_x, extra_bytes, prepare_extra, decode_rows, dequantize_rows_avx2};
  return kTable;
}

}  // namespace pagoda::kernels::detail
