// k-quant decode kernels for AVX-512 VL + VNNI (see matmul_kquant_simd.inc): a whole decode
// batch (up to 7 tokens) per pass in 32 ymm registers, i16 scale products accumulated by one
// vpdpwssd.
#include "core/check.h"

#define KQ_MAX_TILE 7
constexpr int kMaxTile = KQ_MAX_TILE;
constexpr int kRows(int n_tokens) { return n_tokens <= 2 ? 4 : n_tokens <= 4 ? 2 : 1; }
#define ACCUMULATE(acc, pairs, scales) _mm256_dpwssd_epi32((acc), (pairs), (scales))

#include "kernels/matmul_kquant_simd.inc"

namespace pagoda::kernels::detail {

void decode_rows_kquant_avx512(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                               int64_t ldy) {
  decode_rows_kquant(w, x, o_begin, o_end, y, ldy);
}

}  // namespace pagoda::kernels::detail
