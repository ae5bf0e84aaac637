// The AVX2 path of silu_mul (kernels/ops.h): the AVX-512 path's arithmetic, 8 lanes.
#include <immintrin.h>

#include <cmath>

#include "kernels/exp_avx2.h"
#include "kernels/ops.h"

namespace pagoda::kernels::detail {

void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace pagoda::kernels::detail
