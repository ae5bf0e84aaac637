// The int8 GEMM's kernels on AVX2 (`vpmaddubsw` / `vpmaddwd`; layouts, arithmetic and the
// int16 bounds that make it exact: kernels/matmul_int8.h). A tile is kR weight rows x one
// panel group of 16 tokens, held as two registers of 8 tokens (the group's two halves).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/kquant.h"
#include "kernels/matmul_int8.h"
#include "kernels/quant.h"

namespace pagoda::kernels::detail {

namespace {

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

constexpr int kH = 2;            // 8-token registers per 16-token panel group
constexpr int kLanes = 8;        // tokens per register
constexpr int kStepBytes = 64;   // one panel step: 16 tokens x 4 bytes

struct TileArgs {
  const Int8W* w;
  int64_t r0;          // first of the tile's rows in the chunk
  int64_t n_in;
  const uint8_t* u;    // the group's panel
  const float* d;      // the group's scales [n_in / B, kPanelLanes]
  const int32_t* xs;   // the group's sub-block sums (Q4_K/Q5_K)
};

// out [kR][1][kPanelLanes]: the tile's results.
template <int kR>
inline void store(const __m256 (&acc)[kR][kH], float (*out)[1][kPanelLanes]) {
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 2
    for (int h = 0; h < kH; ++h) _mm256_storeu_ps(&out[r][0][kLanes * h], acc[r][h]);
}

// Q8_0 / Q4_0, per 32-value block: y += float(sum) * (d_w * d_x).
//   kSigned (Q8_0): the panel holds q (|q| <= 127); each step's int16 pairs |c| * (sign(c) q)
//     (<= 2 * 128 * 127) are widened at once; the sum starts at 0.
//   else (Q4_0): the panel holds u = q + 128 and |c| <= 8: a block's 8 steps of pair sums add
//     up in int16 (<= 8 * 2 * 255 * 8 = 32640), widened once per block and started at the bias.
template <bool kSigned, int kR>
void tile_block32(const TileArgs& a, float (*out)[1][kPanelLanes]) {
  __m256 acc[kR][kH];
  for (auto& row : acc)
    for (auto& v : row) v = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t n_in = a.n_in, nb = n_in / kQK;
  const int8_t* c = a.w->c.data() + a.r0 * n_in;
  const int32_t* bias = a.w->bias.data() + a.r0 * nb;
  const float* scale = a.w->scale.data() + a.r0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s[kR][kH];  // kSigned: int32 sums; else int16 pair sums
    for (auto& row : s)
      for (auto& v : row) v = _mm256_setzero_si256();
    const int8_t* cb = c + b * kQK;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const uint8_t* up = a.u + (b * 8 + k) * kStepBytes;
      const __m256i x[kH] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(up)),
                             _mm256_load_si256(reinterpret_cast<const __m256i*>(up + 32))};
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const __m256i wv = _mm256_set1_epi32(load_i32(cb + r * n_in + 4 * k));
        if constexpr (kSigned) {
          const __m256i wa = _mm256_abs_epi8(wv);  // -128 -> 0x80, read unsigned as 128
#pragma GCC unroll 2
          for (int h = 0; h < kH; ++h) {
            const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x[h], wv));
            s[r][h] = _mm256_add_epi32(s[r][h], _mm256_madd_epi16(p, ones));
          }
        } else {
#pragma GCC unroll 2
          for (int h = 0; h < kH; ++h) s[r][h] = _mm256_add_epi16(s[r][h], _mm256_maddubs_epi16(x[h], wv));
        }
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < kH; ++h) {
      const __m256 dx = _mm256_loadu_ps(a.d + b * kPanelLanes + kLanes * h);
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        __m256i s32 = s[r][h];
        if constexpr (!kSigned) s32 = _mm256_add_epi32(_mm256_madd_epi16(s32, ones), _mm256_set1_epi32(bias[r * nb + b]));
        const __m256 sw = _mm256_set1_ps(scale[r * nb + b]);
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(sw, dx), acc[r][h]);
      }
    }
  }
  store<kR>(acc, out);
}

// k-quants (panel u = q + 128): per super-block, main = bias + sum_j sc_j * sum_{k in j} c u,
// the int16 pair sums of kFlush steps added before vpmaddwd multiplies them by sc_j (so
// kFlush * 2 * 255 * max|c| < 2^15); offset = sum_j m_j * xsum_j (Q4_K/Q5_K);
// y += float(main) * (d_x * d) - float(offset) * (d_x * dmin).
template <int kSub, int kFlush, bool kMins, int kR>
void tile_kquant(const TileArgs& a, float (*out)[1][kPanelLanes]) {
  static_assert((kSub / 4) % kFlush == 0);
  __m256 acc[kR][kH];
  for (auto& row : acc)
    for (auto& v : row) v = _mm256_setzero_ps();
  constexpr int kSubs = kQK_K / kSub, kSteps = kSub / 4;
  const int64_t n_in = a.n_in, ns = n_in / kQK_K;
  const int8_t* c = a.w->c.data() + a.r0 * n_in;
  const int64_t si0 = a.r0 * ns;
  for (int64_t s = 0; s < ns; ++s) {
    __m256i main[kR][kH];
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r)
      for (auto& v : main[r]) v = _mm256_set1_epi32(a.w->bias[si0 + r * ns + s]);
    const int8_t* cs = c + s * kQK_K;
    const uint8_t* us = a.u + s * (kQK_K / 4) * kStepBytes;
    for (int j = 0; j < kSubs; ++j) {
      __m256i scj[kR];
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        scj[r] = _mm256_set1_epi16(static_cast<int16_t>(a.w->sc[(si0 + r * ns + s) * 16 + j]));
      }
#pragma GCC unroll 8
      for (int f = 0; f < kSteps; f += kFlush) {
        __m256i p16[kR][kH];
        for (auto& row : p16)
          for (auto& v : row) v = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < kFlush; ++k) {
          const int step = j * kSteps + f + k;
          const uint8_t* up = us + step * kStepBytes;
          const __m256i x[kH] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(up)),
                                 _mm256_load_si256(reinterpret_cast<const __m256i*>(up + 32))};
#pragma GCC unroll 4
          for (int r = 0; r < kR; ++r) {
            const __m256i wv = _mm256_set1_epi32(load_i32(cs + r * n_in + 4 * step));
#pragma GCC unroll 2
            for (int h = 0; h < kH; ++h) p16[r][h] = _mm256_add_epi16(p16[r][h], _mm256_maddubs_epi16(x[h], wv));
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < kR; ++r)
#pragma GCC unroll 2
          for (int h = 0; h < kH; ++h) main[r][h] = _mm256_add_epi32(main[r][h], _mm256_madd_epi16(p16[r][h], scj[r]));
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < kH; ++h) {
      const __m256 dx = _mm256_loadu_ps(a.d + s * kPanelLanes + kLanes * h);
#pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const int64_t si = si0 + r * ns + s;
        const __m256 dd = _mm256_mul_ps(dx, _mm256_set1_ps(a.w->d[si]));
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(main[r][h]), dd, acc[r][h]);
        if constexpr (kMins) {
          __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int p = 0; p < 4; ++p) {
            const __m256i xs = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(a.xs + (s * 4 + p) * kPanelLanes + kLanes * h));
            off = _mm256_add_epi32(off, _mm256_madd_epi16(xs, _mm256_set1_epi32(a.w->mins[si * 4 + p])));
          }
          const __m256 dm = _mm256_mul_ps(dx, _mm256_set1_ps(a.w->dmin[si]));
          acc[r][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(off), dm, acc[r][h]);
        }
      }
    }
  }
  store<kR>(acc, out);
}

constexpr int kR = 4;  // rows per tile (unpacked chunks are padded to a multiple of 4)
using TileFn = void (*)(const TileArgs&, float (*out)[1][kPanelLanes]);

TileFn tile_fn(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return tile_block32<true, kR>;
    case DType::kQ4_0:
      return tile_block32<false, kR>;
    case DType::kQ4_K:
      return tile_kquant<32, 4, true, kR>;   // |c| <= 15: 4 * 2 * 255 * 15 = 30600
    case DType::kQ5_K:
      return tile_kquant<32, 2, true, kR>;   // |c| <= 31: 2 * 2 * 255 * 31 = 31620
    case DType::kQ6_K:
      return tile_kquant<16, 2, false, kR>;  // |c| <= 32: 2 * 2 * 255 * 32 = 32640
    default:
      CHECK(false) << "int8 GEMM: " << dtype_name(dtype);
      return nullptr;
  }
}

}  // namespace

void int8_gemm_rows_avx2(const WeightView& wv, int64_t o_begin, int64_t o_end, Int8X& panel, int64_t n_tokens,
                         Int8W& w, float* y, int64_t ldy) {
  const int64_t rows = o_end - o_begin, n_in = wv.n_in;
  CHECK(rows >= 1 && rows <= kInt8RowChunk);
  const int64_t rows_pad = (rows + kR - 1) / kR * kR;
  int8_unpack_rows(wv, o_begin, rows, w);
  const TileFn tile = tile_fn(wv.dtype);
  const int64_t nd = is_kquant(wv.dtype) ? n_in / kQK_K : n_in / kQK;
  const int64_t groups = panel_pad_tokens(n_tokens) / kPanelLanes;
  const uint8_t* u = panel.u_data();
  alignas(32) float out[kR][1][kPanelLanes];
  for (int64_t g = 0; g < groups; ++g) {
    TileArgs a{&w, 0, n_in, u + g * (n_in / 4) * kStepBytes, panel.d.data() + g * nd * kPanelLanes,
               panel.xs.data() + g * (n_in / kQK_K) * 4 * kPanelLanes};
    const int64_t t_end = std::min(n_tokens, (g + 1) * kPanelLanes);
    for (int64_t r0 = 0; r0 < rows_pad; r0 += kR) {
      a.r0 = r0;
      tile(a, out);
      panel_write_tile<kR, 1>(out, std::min<int64_t>(kR, rows - r0), g, t_end, y + o_begin + r0, ldy);
    }
  }
}

}  // namespace pagoda::kernels::detail
