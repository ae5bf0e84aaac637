// The bf16 GEMM on AVX-512 BF16 (layouts and arithmetic: kernels/matmul_bf16.h).
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_*) when inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/matmul_bf16.h"

namespace pagoda::kernels::detail {

namespace {

constexpr int kR = 8;  // weight rows per tile

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 floats -> 16 bf16 (round to nearest even).
inline __m256i to_bf16(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }

// One weight row into dst as bf16.
void convert_row(const WeightView& w, int64_t o, uint16_t* dst) {
  const int64_t n = w.n_in;
  if (w.dtype == DType::kBF16) {
    std::memcpy(dst, w.row(o), static_cast<size_t>(n) * 2);
    return;
  }
  const auto* src = reinterpret_cast<const uint16_t*>(w.row(o));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), to_bf16(f));
  }
  for (; i < n; ++i) dst[i] = fp32_to_bf16(fp16_to_fp32(src[i]));
}

// out [kR, 2, kPanelLanes]: rows r0 .. r0 + 7 of w_rows against kG token registers.
template <int kG>
void tile(const uint16_t* w_rows, int64_t n_in, const uint16_t* const xg[2], float* out) {
  __m512 acc[kR][kG];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) acc[r][g] = _mm512_setzero_ps();
  const int64_t n2 = n_in / 2;
#pragma GCC unroll 2
  for (int64_t k2 = 0; k2 < n2; ++k2) {
    __m512bh x[kG];
#pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) x[g] = reinterpret_cast<__m512bh>(_mm512_load_si512(xg[g] + k2 * 2 * kPanelLanes));
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(load_i32(w_rows + r * n_in + 2 * k2)));
#pragma GCC unroll 2
      for (int g = 0; g < kG; ++g) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], x[g], wv);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < kG; ++g) _mm512_storeu_ps(out + (2 * r + g) * kPanelLanes, acc[r][g]);
}

}  // namespace

void bf16_prepare_x(const float* x, int64_t t_begin, int64_t t_end, int64_t n_in, uint16_t* row, uint16_t* panel) {
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* xt = x + t * n_in;
    int64_t i = 0;
    for (; i + 16 <= n_in; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + i), to_bf16(_mm512_loadu_ps(xt + i)));
    }
    for (; i < n_in; ++i) row[i] = fp32_to_bf16(xt[i]);
    panel_put(row, n_in / 2, t, 0, reinterpret_cast<uint8_t*>(panel));
  }
}

void bf16_pad_x(int64_t n_tokens, int64_t n_in, uint16_t* panel) {
  panel_pad(n_tokens, n_in / 2, 0, reinterpret_cast<uint8_t*>(panel));
}

void bf16_gemm_rows(const WeightView& w, int64_t o_begin, int64_t o_end, const uint16_t* panel, int64_t n_tokens,
                    uint16_t* w_rows, float* y, int64_t ldy) {
  const int64_t rows = o_end - o_begin, n_in = w.n_in;
  CHECK(rows >= 1 && rows <= kBf16RowChunk && n_in % 2 == 0);
  const int64_t rows_pad = (rows + kR - 1) / kR * kR;
  // BF16 rows are read where they are, but for a last partial tile (copied, zero-padded);
  // F16 rows are converted into w_rows.
  const int64_t rows_in_place = w.dtype == DType::kBF16 ? rows / kR * kR : 0;
  const auto* in_place = reinterpret_cast<const uint16_t*>(w.row(o_begin));
  for (int64_t r = rows_in_place; r < rows; ++r) convert_row(w, o_begin + r, w_rows + (r - rows_in_place) * n_in);
  std::memset(w_rows + (rows - rows_in_place) * n_in, 0, static_cast<size_t>((rows_pad - rows) * n_in) * 2);
  auto tile_rows = [&](int64_t r0) {
    return r0 < rows_in_place ? in_place + r0 * n_in : w_rows + (r0 - rows_in_place) * n_in;
  };
  const int64_t groups = panel_pad_tokens(n_tokens) / kPanelLanes;
  alignas(64) float out[kR][2][kPanelLanes];
  for (int64_t g0 = 0; g0 < groups; g0 += 2) {
    const int64_t n_groups = std::min<int64_t>(2, groups - g0);
    const uint16_t* xg[2] = {panel + g0 * n_in * kPanelLanes, panel + (g0 + n_groups - 1) * n_in * kPanelLanes};
    const int64_t t_end = std::min(n_tokens, (g0 + n_groups) * kPanelLanes);
    for (int64_t r0 = 0; r0 < rows_pad; r0 += kR) {
      if (n_groups == 2) {
        tile<2>(tile_rows(r0), n_in, xg, &out[0][0][0]);
      } else {
        tile<1>(tile_rows(r0), n_in, xg, &out[0][0][0]);
      }
      panel_write_tile<kR>(out, std::min<int64_t>(kR, rows - r0), g0, t_end, y + o_begin + r0, ldy);
    }
  }
}

}  // namespace pagoda::kernels::detail
