// k-quant decode kernels for AVX2 + FMA + F16C (see matmul_kquant_simd.inc): up to 4 tokens
// per pass (16 ymm registers), i16 scale products summed with madd + add.
#include "core/check.h"

#define KQ_MAX_TILE 4
constexpr int kMaxTile = KQ_MAX_TILE;
constexpr int kRows(int n_tokens) { return n_tokens <= 2 ? 2 : 1; }
#define ACCUMULATE(acc, pairs, scales) _mm256_add_epi32((acc), _mm256_madd_epi16((pairs), (scales)))

#include "kernels/matmul_kquant_simd.inc"

namespace pagoda::kernels::detail {

void decode_rows_kquant_avx2(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                             int64_t ldy) {
  decode_rows_kquant(w, x, o_begin, o_end, y, ldy);
}

}  // namespace pagoda::kernels::detail
