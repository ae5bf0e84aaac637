// Block formats of quantized weights (exactly ggml's) and row conversions to/from f32.
//
//   Q8_0: 32 values per block { f16 d; int8 qs[32]; }          x[i] = d * qs[i]
//   Q4_0: 32 values per block { f16 d; uint8 qs[16]; }         x[j]      = d * ((qs[j] & 15) - 8)
//                                                                x[j + 16] = d * ((qs[j] >> 4) - 8)
// Quantizers follow ggml's reference rounding so files we write match llama.cpp's.
// The k-quants (Q4_K, Q5_K, Q6_K) are defined in kernels/kquant.h; the two functions below
// handle every DType. All functions are scalar references; fast paths live behind kernels/matmul.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::kernels {

constexpr int kQK = 32;  // values per Q8_0 / Q4_0 block

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// src: n values of `dtype` (n a multiple of the block size); dst: n floats.
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);
// src: n floats; dst: dtype_row_bytes(dtype, n) bytes.
void quantize_row(DType dtype, const float* src, void* dst, int64_t n);

}  // namespace pagoda::kernels
