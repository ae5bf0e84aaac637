// Internal to the kernels: a vectorized exp for files compiled for AVX2 + FMA (*_avx2.cpp):
// the prefill attention's softmax. The AVX-512 one's arithmetic (exp_avx512.h), 8 lanes.
#pragma once

#include <immintrin.h>

namespace pagoda::kernels::detail {

// exp(x) for x <= 88 (Cephes expf: x = n ln2 + r, degree-6 polynomial in r, times 2^n); exactly
// 1 at 0; below about -86.7 (n = -126) it is 0 rather than subnormal, and callers mask what must
// be 0 anyway.
inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365478515625f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n as 2^(n-1) * 2: n is in [-126, 128] after the clamp and (n + 126) << 23 is the exponent
  // field of 2^(n-1) (0 at n = -126: the result is 0 there).
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  return _mm256_mul_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
}

}  // namespace pagoda::kernels::detail
