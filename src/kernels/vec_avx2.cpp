#include "core/dtype.h"
#include "kernels/vec.h"

constexpr int kLanes = 8;
#include "kernels/vec_simd.inc"

namespace {
inline VecF load_f16(const uint16_t* p) {
  __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  VecF out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
}  // namespace

namespace pagoda::kernels::detail {
const VecOps& vec_ops_avx2() {
  static constexpr VecOps kOps = {dot_f32, dot_f16, axpy_f32, axpy_f16};
  return kOps;
}
}  // namespace pagoda::kernels::detail
