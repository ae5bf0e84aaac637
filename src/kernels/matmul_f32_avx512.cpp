// The f32 GEMM of batched decode steps on AVX-512 (layouts and arithmetic: kernels/matmul_f32.h).
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_*) when inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/matmul_f32.h"

namespace pagoda::kernels::detail {

namespace {

// 16 weights from `src` (F16 or BF16 bits) as f32, exactly.
template <DType kDType>
inline __m512 load16(const uint16_t* src) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  if constexpr (kDType == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The tile's rows (rows + r * row_bytes for r < real, zero from `real` on), inputs
// [k0, k0 + kn), into chunk [kn / 16, kR, 16].
template <int kR, DType kDType>
inline void convert_chunk(const uint8_t* rows, size_t row_bytes, int64_t real, int64_t k0, int64_t kn, float* chunk) {
  for (int64_t r = 0; r < kR; ++r) {
    float* dst = chunk + r * 16;
    if (r >= real) {
      for (int64_t j = 0; j < kn / 16; ++j) _mm512_store_ps(dst + j * kR * 16, _mm512_setzero_ps());
      continue;
    }
    const auto* src = reinterpret_cast<const uint16_t*>(rows + r * row_bytes) + k0;
    for (int64_t j = 0; j < kn / 16; ++j) _mm512_store_ps(dst + j * kR * 16, load16<kDType>(src + 16 * j));
  }
}

// Weight chunks prefetched (into L2) ahead of the one being multiplied, spread over its steps.
constexpr int64_t kPrefetchChunks = 2;
constexpr int64_t kStepsPerChunk = kF32KChunk / 16;
constexpr int64_t kLinesPerRow = kF32KChunk * 2 / 64;  // of one row's chunk

// out [kR, kG, 16] = rows [o0, o0 + real) against the kG token registers at xg[0 .. kG).
template <int kR, int kG, DType kDType>
__attribute__((noinline)) void tile(const uint8_t* rows, size_t row_bytes, int64_t n_in, int64_t real,
                                    const float* const* xg, float* chunk, float* out) {
  constexpr int64_t kLinesPerStep = kR * kLinesPerRow / kStepsPerChunk;  // that a step prefetches
  static_assert(kLinesPerStep * kStepsPerChunk == kR * kLinesPerRow);
  __m512 acc[kR][kG];
#pragma GCC unroll 16
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 3
    for (int g = 0; g < kG; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < n_in; k0 += kF32KChunk) {
    const int64_t kn = std::min(kF32KChunk, n_in - k0);
    convert_chunk<kR, kDType>(rows, row_bytes, real, k0, kn, chunk);
    // Chunk k0 + kPrefetchChunks * kF32KChunk of each row; past a row's end that is the next
    // tile's rows (rows are contiguous), which the tile after this one reads first.
    const int64_t ahead = k0 + kPrefetchChunks * kF32KChunk;
    const char* pf = reinterpret_cast<const char*>(
        ahead < n_in ? rows + ahead * 2 : rows + kR * row_bytes + (ahead - n_in) * 2);
    for (int64_t j = 0; j < kn / 16; ++j) {
#pragma GCC unroll 16
      for (int64_t l = j * kLinesPerStep; l < (j + 1) * kLinesPerStep; ++l) {
        _mm_prefetch(pf + (l / kLinesPerRow) * row_bytes + (l % kLinesPerRow) * 64, _MM_HINT_T1);
      }
      const float* p = chunk + j * kR * 16;
      const float* xs[kG];
#pragma GCC unroll 3
      for (int g = 0; g < kG; ++g) xs[g] = xg[g] + (k0 + 16 * j) * kPanelLanes;
#pragma GCC unroll 16
      for (int kk = 0; kk < 16; ++kk) {
        __m512 xv[kG];
#pragma GCC unroll 3
        for (int g = 0; g < kG; ++g) xv[g] = _mm512_load_ps(xs[g] + kk * kPanelLanes);
#pragma GCC unroll 16
        for (int r = 0; r < kR; ++r) {
          const __m512 wv = _mm512_set1_ps(p[r * 16 + kk]);
#pragma GCC unroll 3
          for (int g = 0; g < kG; ++g) acc[r][g] = _mm512_fmadd_ps(wv, xv[g], acc[r][g]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 3
    for (int g = 0; g < kG; ++g) _mm512_storeu_ps(out + (r * kG + g) * kPanelLanes, acc[r][g]);
}

// Rows [o_begin, o_end) against all kG token registers of the panel, kR rows a tile.
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
      return gemm_groups<16, 1, kDType>(w, o_begin, o_end, panel, n_tokens, chunk, y, ldy);
    case 2:
      return gemm_groups<8, 2, kDType>(w, o_begin, o_end, panel, n_tokens, chunk, y, ldy);
    case 3:
      return gemm_groups<8, 3, kDType>(w, o_begin, o_end, panel, n_tokens, chunk, y, ldy);
    default:
      CHECK(false) << n_tokens << " tokens: the f32 GEMM takes at most " << 3 * kPanelLanes;
  }
}

}  // namespace

void f32_gemm_rows(const WeightView& w, int64_t o_begin, int64_t o_end, const float* panel, int64_t n_tokens,
                   float* w_chunk, float* y, int64_t ldy) {
  CHECK(o_end - o_begin >= 1 && o_end - o_begin <= kF32RowChunk && f32_gemm_weights(w));
  if (w.dtype == DType::kF16) return gemm_rows<DType::kF16>(w, o_begin, o_end, panel, n_tokens, w_chunk, y, ldy);
  gemm_rows<DType::kBF16>(w, o_begin, o_end, panel, n_tokens, w_chunk, y, ldy);
}

}  // namespace pagoda::kernels::detail
