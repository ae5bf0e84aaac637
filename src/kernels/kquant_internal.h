// Internal to src/kernels: helpers shared by the k-quant references.
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda::kernels::detail {

// Round half to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the rounded integer in
// the low mantissa bits. Defined for |v| <= 2^22 - 1; larger magnitudes (which ggml asserts
// against) are clamped first so the result stays an ordinary int.
inline int nearest_int(float v) {
  constexpr float kLimit = 4194303.0f;
  if (!(v <= kLimit)) v = v != v ? 0.0f : kLimit;  // NaN -> 0
  if (v < -kLimit) v = -kLimit;
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace pagoda::kernels::detail
