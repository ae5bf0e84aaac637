// Small vector primitives used by attention and the element-wise ops, dispatched once per
// ISA (scalar, AVX2, AVX-512) like the matmul kernels. `vec_ops(isa)` returns the table;
// `vec_ops(Isa::kScalar)` is the reference every other table is tested against.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace pagoda::kernels {

struct VecOps {
  // sum_i a[i] * b[i]
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // sum_i f16(a[i]) * b[i]
  float (*dot_f16)(const uint16_t* a, const float* b, int64_t n);
  // y[i] += alpha * x[i]
  void (*axpy_f32)(float alpha, const float* x, float* y, int64_t n);
  // y[i] += alpha * f16(x[i])
  void (*axpy_f16)(float alpha, const uint16_t* x, float* y, int64_t n);
};

const VecOps& vec_ops(Isa isa);

namespace detail {
const VecOps& vec_ops_avx2();
const VecOps& vec_ops_avx512();
}  // namespace detail

}  // namespace pagoda::kernels
