// The AVX-512 paths of silu_mul, gelu_mul, exp_shifted_sum and max_of (kernels/ops.h).
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_ps) when inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/exp_avx512.h"
#include "kernels/ops.h"

namespace pagoda::kernels::detail {

void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_mul_avx512(float* gate, const float* up, int64_t n) {
  // ops.h: g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))), the scalar reference's order.
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 b = _mm512_set1_ps(0.044715f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(b, g), g), g);
    const __m512 e = exp512(_mm512_mul_ps(a, _mm512_add_ps(g, g3)));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  constexpr float kC = 0.7978845608028654f;
  for (; i < n; ++i) {
    const float x = gate[i];
    gate[i] = x / (1.0f + std::exp(-2.0f * kC * (x + 0.044715f * x * x * x))) * up[i];
  }
}

float exp_shifted_sum_avx512(float* x, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  float sum = _mm512_reduce_add_ps(acc);
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

float max_of_avx512(const float* x, int64_t n, float init) {
  __m512 m = _mm512_set1_ps(init);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  init = std::max(init, _mm512_reduce_max_ps(m));
  for (; i < n; ++i) init = std::max(init, x[i]);
  return init;
}

}  // namespace pagoda::kernels::detail
