#include "core/dtype.h"

#include "core/check.h"

namespace pagoda {

namespace {
constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4},       {"f16", 1, 2},       {"bf16", 1, 2},      {"q8_0", 32, 34},
    {"q4_0", 32, 18},    {"q4_k", 256, 144},  {"q5_k", 256, 176},  {"q6_k", 256, 210},
};
}  // namespace

const DTypeInfo& dtype_info(DType dtype) {
  auto index = static_cast<size_t>(dtype);
  CHECK_LT(index, std::size(kInfos));
  return kInfos[index];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kInfos); ++i) {
    if (kInfos[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

size_t dtype_row_bytes(DType dtype, int64_t n) {
  const DTypeInfo& info = dtype_info(dtype);
  CHECK_EQ(n % info.block_elems, 0) << "row of " << n << " " << info.name << " values";
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

float fp16_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t abs = bits & 0x7fffffff;
  if (abs > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000) {  // subnormal or zero in fp16
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);  // rounds to zero
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // 113 - exp + 13
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

}  // namespace pagoda
