#include "kernels/vec.h"

#include "core/dtype.h"

namespace pagoda::kernels {
namespace {

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
float dot_f16_scalar(const uint16_t* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(a[i]) * b[i];
  return sum;
}
void axpy_f32_scalar(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void axpy_f16_scalar(float alpha, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_fp32(x[i]);
}

constexpr VecOps kScalarOps = {dot_f32_scalar, dot_f16_scalar, axpy_f32_scalar, axpy_f16_scalar};

}  // namespace

const VecOps& vec_ops(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return detail::vec_ops_avx512();
    case Isa::kAvx2: return detail::vec_ops_avx2();
    case Isa::kScalar: break;
  }
  return kScalarOps;
}

}  // namespace pagoda::kernels
