// The int8 GEMM's kernels on AVX-512 VNNI: 4 weight rows x 1 or 2 registers of 16 tokens
// (layouts and arithmetic: kernels/matmul_int8.h; the data they read is prepared in
// matmul_int8_pack_avx512.cpp).
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_*) when inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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

// ---- kernels: 4 weight rows x 1 or 2 token registers over all of n_in ----

constexpr int kR = 4;

// out [kR, 2, kPanelLanes]: the tile's results, row-major.
template <int kG>
inline void zero(__m512 acc[kR][kG]) {
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) acc[r][g] = _mm512_setzero_ps();
}
template <int kG>
inline void store(__m512 acc[kR][kG], float* out) {
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) _mm512_storeu_ps(out + (2 * r + g) * kPanelLanes, acc[r][g]);
}

struct TileArgs {
  const Int8W* w;
  int64_t r0;        // first of the 4 rows in the chunk
  int64_t n_in;
  const uint8_t* u[2];   // the two token groups' panels
  const float* d[2];
  const int32_t* xs[2];
};

// Q8_0 / Q4_0: per 32-value block, y += float(bias + sum c u) * (d_w * d_x). kG token
// registers (1 or 2).
template <int kG>
void tile_block32(const TileArgs& a, float* out) {
  __m512 acc[kR][kG];
  zero<kG>(acc);
  const int64_t n_in = a.n_in, nb = n_in / kQK;
  const int8_t* c = a.w->c.data() + a.r0 * n_in;
  const int32_t* bias = a.w->bias.data() + a.r0 * nb;
  const float* scale = a.w->scale.data() + a.r0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[kR][kG];
    #pragma GCC unroll 4
    for (int r = 0; r < kR; ++r)
      #pragma GCC unroll 2
      for (int g = 0; g < kG; ++g) s[r][g] = _mm512_set1_epi32(bias[r * nb + b]);
    const int8_t* cb = c + b * kQK;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512i x[kG];
      #pragma GCC unroll 2
      for (int g = 0; g < kG; ++g) x[g] = _mm512_load_si512(a.u[g] + (b * 8 + k) * 64);
      #pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const __m512i wv = _mm512_set1_epi32(load_i32(cb + r * n_in + 4 * k));
        #pragma GCC unroll 2
        for (int g = 0; g < kG; ++g) s[r][g] = _mm512_dpbusd_epi32(s[r][g], x[g], wv);
      }
    }
    #pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) {
      const __m512 dx = _mm512_loadu_ps(a.d[g] + b * kPanelLanes);
      #pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const __m512 sw = _mm512_set1_ps(scale[r * nb + b]);
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][g]), _mm512_mul_ps(sw, dx), acc[r][g]);
      }
    }
  }
  store<kG>(acc, out);
}

// k-quants: per super-block, main = bias + sum_j sc_j * sum_{k in j} c u (sub-blocks of
// kSub values), offset = sum_j m_j * xsum_j (Q4_K/Q5_K), y += float(main) * (d_x * d) -
// float(offset) * (d_x * dmin).
template <int kSub, bool kMins, int kG>
void tile_kquant(const TileArgs& a, float* out) {
  __m512 acc[kR][kG];
  zero<kG>(acc);
  constexpr int kSubs = kQK_K / kSub, kSteps = kSub / 4;
  const int64_t n_in = a.n_in, ns = n_in / kQK_K;
  const int8_t* c = a.w->c.data() + a.r0 * n_in;
  const int64_t si0 = a.r0 * ns;
  for (int64_t s = 0; s < ns; ++s) {
    __m512i main[kR][kG];
    #pragma GCC unroll 4
    for (int r = 0; r < kR; ++r)
      #pragma GCC unroll 2
      for (int g = 0; g < kG; ++g) main[r][g] = _mm512_set1_epi32(a.w->bias[si0 + r * ns + s]);
    const int8_t* cs = c + s * kQK_K;
    for (int j = 0; j < kSubs; ++j) {
      __m512i sub[kR][kG];
      #pragma GCC unroll 4
      for (int r = 0; r < kR; ++r)
        #pragma GCC unroll 2
        for (int g = 0; g < kG; ++g) sub[r][g] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < kSteps; ++k) {
        const int64_t k4 = s * (kQK_K / 4) + j * kSteps + k;
        __m512i x[kG];
        #pragma GCC unroll 2
        for (int g = 0; g < kG; ++g) x[g] = _mm512_load_si512(a.u[g] + 64 * k4);
        #pragma GCC unroll 4
        for (int r = 0; r < kR; ++r) {
          const __m512i wv = _mm512_set1_epi32(load_i32(cs + r * n_in + 4 * (j * kSteps + k)));
          #pragma GCC unroll 2
          for (int g = 0; g < kG; ++g) sub[r][g] = _mm512_dpbusd_epi32(sub[r][g], x[g], wv);
        }
      }
      #pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const __m512i scj = _mm512_set1_epi32(a.w->sc[(si0 + r * ns + s) * 16 + j]);
        #pragma GCC unroll 2
        for (int g = 0; g < kG; ++g) main[r][g] = _mm512_add_epi32(main[r][g], _mm512_mullo_epi32(sub[r][g], scj));
      }
    }
    #pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) {
      const __m512 dx = _mm512_loadu_ps(a.d[g] + s * kPanelLanes);
      #pragma GCC unroll 4
      for (int r = 0; r < kR; ++r) {
        const int64_t si = si0 + r * ns + s;
        const __m512 dd = _mm512_mul_ps(dx, _mm512_set1_ps(a.w->d[si]));
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(main[r][g]), dd, acc[r][g]);
        if constexpr (kMins) {
          __m512i off = _mm512_setzero_si512();
          #pragma GCC unroll 4
          for (int p = 0; p < 4; ++p) {
            off = _mm512_dpwssd_epi32(off, _mm512_loadu_si512(a.xs[g] + (s * 4 + p) * kPanelLanes),
                                      _mm512_set1_epi32(a.w->mins[si * 4 + p]));
          }
          const __m512 dm = _mm512_mul_ps(dx, _mm512_set1_ps(a.w->dmin[si]));
          acc[r][g] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(off), dm, acc[r][g]);
        }
      }
    }
  }
  store<kG>(acc, out);
}

using TileFn = void (*)(const TileArgs&, float* out);

// The kernel for weights of `dtype` over kG token registers.
template <int kG>
TileFn tile_fn(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      return tile_block32<kG>;
    case DType::kQ4_K:
    case DType::kQ5_K:
      return tile_kquant<32, true, kG>;
    case DType::kQ6_K:
      return tile_kquant<16, false, kG>;
    default:
      CHECK(false) << "int8 GEMM: " << dtype_name(dtype);
      return nullptr;
  }
}

}  // namespace

void int8_quantize_q8k(const float* x, BlockQ8_K* y, int64_t n) {
  CHECK_EQ(n % kQK_K, 0);
  constexpr int kVecs = kQK_K / 16;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& blk = y[b];
    __m512 vmax = _mm512_setzero_ps();
    for (int i = 0; i < kVecs; ++i) vmax = _mm512_max_ps(vmax, _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * i)));
    const float amax = _mm512_reduce_max_ps(vmax);
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    float max = 0.0f;  // the first value of largest magnitude, as the scalar search finds it
    for (int i = 0; i < kVecs; ++i) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * i)),
                                               _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (hit != 0) {
        max = xb[16 * i + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 vscale = _mm512_set1_ps(iscale);
    for (int i = 0; i < kVecs; ++i) {  // round half to even (the default MXCSR mode), at most 127
      const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vscale, _mm512_loadu_ps(xb + 16 * i))),
                                         _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs + 16 * i), _mm512_cvtsepi32_epi8(q));
      blk.bsums[i] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    blk.d = 1.0f / iscale;
  }
}

void int8_gemm_rows_avx512(const WeightView& wv, int64_t o_begin, int64_t o_end, Int8X& panel, int64_t n_tokens,
                    Int8W& w, float* y, int64_t ldy) {
  const int64_t rows = o_end - o_begin, n_in = wv.n_in;
  CHECK(rows >= 1 && rows <= kInt8RowChunk);
  const int64_t rows_pad = (rows + kR - 1) / kR * kR;
  int8_unpack_rows(wv, o_begin, rows, w);
  const TileFn tiles[2] = {tile_fn<1>(wv.dtype), tile_fn<2>(wv.dtype)};
  const int64_t nd = is_kquant(wv.dtype) ? n_in / kQK_K : n_in / kQK;
  const int64_t groups = panel_pad_tokens(n_tokens) / kPanelLanes;
  const uint8_t* u = panel.u_data();
  alignas(64) float out[kR][2][kPanelLanes];
  for (int64_t g0 = 0; g0 < groups; g0 += 2) {
    const int64_t n_groups = std::min<int64_t>(2, groups - g0);
    TileArgs a{&w, 0, n_in, {}, {}, {}};
    for (int64_t g = 0; g < n_groups; ++g) {
      a.u[g] = u + (g0 + g) * (n_in / 4) * kPanelLanes * 4;
      a.d[g] = panel.d.data() + (g0 + g) * nd * kPanelLanes;
      a.xs[g] = panel.xs.data() + (g0 + g) * (n_in / kQK_K) * 4 * kPanelLanes;
    }
    const int64_t t_end = std::min(n_tokens, (g0 + n_groups) * kPanelLanes);
    for (int64_t r0 = 0; r0 < rows_pad; r0 += kR) {
      a.r0 = r0;
      tiles[n_groups - 1](a, &out[0][0][0]);
      panel_write_tile<kR>(out, std::min<int64_t>(kR, rows - r0), g0, t_end, y + o_begin + r0, ldy);
    }
  }
}

}  // namespace pagoda::kernels::detail