// Element types of weights and KV, with their storage geometry.
//
// Quantized types are stored in blocks: `block_elems` values share one block of
// `block_bytes` bytes (GGUF/ggml definitions for Q8_0, Q4_0 and the k-quants; the block
// layouts are in kernels/quant.h and kernels/kquant.h). Plain types have
// block_elems == 1. Row bytes = n / block_elems * block_bytes (n a multiple of block_elems).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace pagoda {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // 32 values: f16 scale d, 32 x int8 q; x = d * q
  kQ4_0,  // 32 values: f16 scale d, 16 bytes of nibbles; x = d * (q - 8);
          // byte j holds value j (low nibble) and value j + 16 (high nibble)
  kQ4_K,  // 256 values in 8 sub-blocks of 32 with 6-bit scales and mins: 144 bytes
  kQ5_K,  // as Q4_K plus a fifth bit per value: 176 bytes
  kQ6_K,  // 256 values in 16 sub-blocks of 16 with int8 scales, 6-bit quants: 210 bytes
};

struct DTypeInfo {
  std::string_view name;  // "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"
  int block_elems;
  int block_bytes;
};

const DTypeInfo& dtype_info(DType dtype);
inline std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of `n` elements; n must be a multiple of the block size (CHECKed).
size_t dtype_row_bytes(DType dtype, int64_t n);

// ---- scalar half-precision conversions (exact, round-to-nearest-even) ----
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

inline float bf16_to_fp32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t fp32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 64);  // NaN
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace pagoda
