#include "core/dtype.h"
#include "kernels/vec.h"

constexpr int kLanes = 16;
#include "kernels/vec_simd.inc"

namespace {
inline VecF load_f16(const uint16_t* p) {
  __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  VecF out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
}  // namespace

namespace pagoda::kernels::detail {
const VecOps& vec_ops_avx512() {
  static constexpr VecOps kOps = {dot_f32, dot_f16, axpy_f32, axpy_f16};
  return kOps;
}
}  // namespace pagoda::kernels::detail
