// Scalar row conversions between f32 and the weight dtypes, following ggml's reference
// quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref) bit for bit.
#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kquant.h"

namespace pagoda::kernels {

namespace {

void dequantize_q8_0(const BlockQ8_0* blocks, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * static_cast<float>(blocks[b].qs[j]);
  }
}

void dequantize_q4_0(const BlockQ4_0* blocks, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(blocks[b].d);
    float* out = dst + b * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      out[j] = d * static_cast<float>((blocks[b].qs[j] & 15) - 8);
      out[j + kQK / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) - 8);
    }
  }
}

// amax = max |x|, d = amax / 127, q = round(x / d) computed as roundf(x * (1 / d)).
void quantize_q8_0(const float* src, BlockQ8_0* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) blocks[b].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

// max = the value of largest magnitude (sign kept), d = max / -8,
// q = min(15, (int8)(x / d + 8.5)), so `max` itself maps to q = 0, i.e. -8 * d.
void quantize_q4_0(const float* src, BlockQ4_0* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int8_t lo = static_cast<int8_t>(x[j] * id + 8.5f);
      const int8_t hi = static_cast<int8_t>(x[j + kQK / 2] * id + 8.5f);
      const uint8_t q0 = static_cast<uint8_t>(std::min<int8_t>(15, lo));
      const uint8_t q1 = static_cast<uint8_t>(std::min<int8_t>(15, hi));
      blocks[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

}  // namespace

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  CHECK_EQ(n % dtype_info(dtype).block_elems, 0);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case DType::kQ8_0:
      dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case DType::kQ4_0:
      dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      dequantize_row_kquant(dtype, src, dst, n);
      return;
  }
  CHECK(false) << "dequantize_row: unknown dtype " << static_cast<int>(dtype);
}

void quantize_row(DType dtype, const float* src, void* dst, int64_t n) {
  CHECK_EQ(n % dtype_info(dtype).block_elems, 0);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case DType::kQ4_0:
      quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      quantize_row_kquant(dtype, src, dst, n);
      return;
  }
  CHECK(false) << "quantize_row: unknown dtype " << static_cast<int>(dtype);
}

}  // namespace pagoda::kernels
