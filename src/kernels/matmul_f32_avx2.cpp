// The f32 GEMM of batched decode steps on AVX2 + FMA + F16C (layouts and arithmetic:
// kernels/matmul_f32.h). The panel's 16 tokens of an input are two 8-float registers here, so a
// tile is kR rows x kG groups x 2 halves: at most 12 of the 16 ymm registers accumulate, the rest
// hold the token registers and the broadcast weight. The sums are the AVX-512 kernel's, one FMA
// per product in input order per (row, token): both give the same bits.
// Also the panel's fill (f32_prepare_x, f32_pad_x), which every ISA with the GEMM runs.
#include <immintrin.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/matmul_f32.h"

namespace pagoda::kernels::detail {

namespace {

// 8 weights from `src` (F16 or BF16 bits) as f32, exactly.
template <DType kDType>
inline __m256 load8(const uint16_t* src) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  if constexpr (kDType == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The tile's rows (rows + r * row_bytes for r < real, zero from `real` on), inputs
// [k0, k0 + kn), into chunk [kn / 16, kR, 16].
template <int kR, DType kDType>
inline void convert_chunk(const uint8_t* rows, size_t row_bytes, int64_t real, int64_t k0, int64_t kn, float* chunk) {
  for (int64_t r = 0; r < kR; ++r) {
    float* dst = chunk + r * 16;
    if (r >= real) {
      for (int64_t j = 0; j < kn / 16; ++j) {
        _mm256_store_ps(dst + j * kR * 16, _mm256_setzero_ps());
        _mm256_store_ps(dst + j * kR * 16 + 8, _mm256_setzero_ps());
      }
      continue;
    }
    const auto* src = reinterpret_cast<const uint16_t*>(rows + r * row_bytes) + k0;
    for (int64_t j = 0; j < kn / 16; ++j) {
      _mm256_store_ps(dst + j * kR * 16, load8<kDType>(src + 16 * j));
      _mm256_store_ps(dst + j * kR * 16 + 8, load8<kDType>(src + 16 * j + 8));
    }
  }
}

constexpr int64_t kPrefetchChunks = 2;  // weight chunks prefetched (into L2) ahead
constexpr int64_t kLinesPerRow = kF32KChunk * 2 / 64;  // of one row's chunk

// out [kR, kG, 16] = rows [o0, o0 + real) against the kG token groups at xg[0 .. kG).
template <int kR, int kG, DType kDType>
__attribute__((noinline)) void tile(const uint8_t* rows, size_t row_bytes, int64_t n_in, int64_t real,
                                    const float* const* xg, float* chunk, float* out) {
  static_assert(kR * kG * 2 <= 12, "accumulators beside the token registers and the broadcast");
  __m256 acc[kR][kG][2];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 3
    for (int g = 0; g < kG; ++g) acc[r][g][0] = acc[r][g][1] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < n_in; k0 += kF32KChunk) {
    const int64_t kn = std::min(kF32KChunk, n_in - k0);
    convert_chunk<kR, kDType>(rows, row_bytes, real, k0, kn, chunk);
    // The same chunk kPrefetchChunks ahead, a row's lines at a time; past a row's end that is the
    // next tile's rows (rows are contiguous), which the tile after this one reads first.
    const int64_t ahead = k0 + kPrefetchChunks * kF32KChunk;
    const char* pf = reinterpret_cast<const char*>(ahead < n_in ? rows + ahead * 2 : rows + kR * row_bytes + (ahead - n_in) * 2);
    for (int64_t j = 0; j < kn / 16; ++j) {
      if (j < kR * kLinesPerRow) _mm_prefetch(pf + (j / kLinesPerRow) * row_bytes + (j % kLinesPerRow) * 64, _MM_HINT_T1);
      const float* p = chunk + j * kR * 16;
      const float* xs[kG];
#pragma GCC unroll 3
      for (int g = 0; g < kG; ++g) xs[g] = xg[g] + (k0 + 16 * j) * kPanelLanes;
#pragma GCC unroll 16
      for (int kk = 0; kk < 16; ++kk) {
        __m256 xv[kG][2];
#pragma GCC unroll 3
        for (int g = 0; g < kG; ++g) {
          xv[g][0] = _mm256_load_ps(xs[g] + kk * kPanelLanes);
          xv[g][1] = _mm256_load_ps(xs[g] + kk * kPanelLanes + 8);
        }
#pragma GCC unroll 8
        for (int r = 0; r < kR; ++r) {
          const __m256 wv = _mm256_broadcast_ss(p + r * 16 + kk);
#pragma GCC unroll 3
          for (int g = 0; g < kG; ++g) {
            acc[r][g][0] = _mm256_fmadd_ps(wv, xv[g][0], acc[r][g][0]);
            acc[r][g][1] = _mm256_fmadd_ps(wv, xv[g][1], acc[r][g][1]);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 3
    for (int g = 0; g < kG; ++g) {
      _mm256_storeu_ps(out + (r * kG + g) * kPanelLanes, acc[r][g][0]);
      _mm256_storeu_ps(out + (r * kG + g) * kPanelLanes + 8, acc[r][g][1]);
    }
}

// Rows [o_begin, o_end) against all kG token groups of the panel, kR rows a tile.
template <int kR, int kG, DType kDType>
void gemm_groups(const WeightView& w, int64_t o_begin, int64_t o_end, const float* panel, int64_t n_tokens,
                 float* chunk, float* y, int64_t ldy) {
  const float* xg[kG];
  for (int g = 0; g < kG; ++g) xg[g] = panel + g * w.n_in * kPanelLanes;
  alignas(64) float out[kR][kG][kPanelLanes];
  const size_t row_bytes = w.row_bytes();
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kR) {
    const int64_t real = std::min<int64_t>(kR, o_end - o0);
    tile<kR, kG, kDType>(w.row(o0), row_bytes, w.n_in, real, xg, chunk, &out[0][0][0]);
    panel_write_tile<kR>(out, real, 0, n_tokens, y + o0, ldy);
  }
}

template <DType kDType>
void gemm_rows(const WeightView& w, int64_t o_begin, int64_t o_end, const float* panel, int64_t n_tokens,
               float* chunk, float* y, int64_t ldy) {
  switch (panel_pad_tokens(n_tokens) / kPanelLanes) {
    case 1:
      return gemm_groups<6, 1, kDType>(w, o_begin, o_end, panel, n_tokens, chunk, y, ldy);
    case 2:
      return gemm_groups<3, 2, kDType>(w, o_begin, o_end, panel, n_tokens, chunk, y, ldy);
    case 3:
      return gemm_groups<2, 3, kDType>(w, o_begin, o_end, panel, n_tokens, chunk, y, ldy);
    default:
      CHECK(false) << n_tokens << " tokens: the f32 GEMM takes at most " << 3 * kPanelLanes;
  }
}

}  // namespace

void f32_prepare_x(const float* x, int64_t t_begin, int64_t t_end, int64_t n_in, float* panel) {
  for (int64_t t = t_begin; t < t_end; ++t) panel_put(x + t * n_in, n_in, t, 0, reinterpret_cast<uint8_t*>(panel));
}

void f32_pad_x(int64_t n_tokens, int64_t n_in, float* panel) {
  panel_pad(n_tokens, n_in, 0, reinterpret_cast<uint8_t*>(panel));
}

void f32_gemm_rows_avx2(const WeightView& w, int64_t o_begin, int64_t o_end, const float* panel, int64_t n_tokens,
                        float* w_chunk, float* y, int64_t ldy) {
  CHECK(o_end - o_begin >= 1 && o_end - o_begin <= kF32RowChunk && f32_gemm_weights(w));
  if (w.dtype == DType::kF16) return gemm_rows<DType::kF16>(w, o_begin, o_end, panel, n_tokens, w_chunk, y, ldy);
  gemm_rows<DType::kBF16>(w, o_begin, o_end, panel, n_tokens, w_chunk, y, ldy);
}

}  // namespace pagoda::kernels::detail
