// The AVX2 paths of silu_mul, gelu_mul, exp_shifted_sum and max_of (kernels/ops.h): the AVX-512 paths' arithmetic, 8 lanes.
#include <immintrin.h>

#include <algorithm>
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

void gelu_mul_avx2(float* gate, const float* up, int64_t n) {
  // ops.h: g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))), the scalar reference's order.
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 a = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 b = _mm256_set1_ps(0.044715f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(b, g), g), g);
    const __m256 e = exp256(_mm256_mul_ps(a, _mm256_add_ps(g, g3)));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  constexpr float kC = 0.7978845608028654f;
  for (; i < n; ++i) {
    const float x = gate[i];
    gate[i] = x / (1.0f + std::exp(-2.0f * kC * (x + 0.044715f * x * x * x))) * up[i];
  }
}

float exp_shifted_sum_avx2(float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

float max_of_avx2(const float* x, int64_t n, float init) {
  __m256 m = _mm256_set1_ps(init);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  for (float v : lanes) init = std::max(init, v);
  for (; i < n; ++i) init = std::max(init, x[i]);
  return init;
}

}  // namespace pagoda::kernels::detail
