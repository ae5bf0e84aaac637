#include "core/dtype.h"
#include "kernels/kv_quant.h"

constexpr int kLanes = 16;
#include "kernels/kv_quant_simd.inc"

namespace {
template <typename To, typename From>
inline To bit_cast_vec(From v) {
  To out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
inline VecF load_f16(const uint16_t* p) {
  return bit_cast_vec<VecF>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
inline void store_f16(uint16_t* p, VecF v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(bit_cast_vec<__m512>(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store_narrow_u16(uint16_t* p, VecU32 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bit_cast_vec<__m512i>(v)));
}
inline VecI32 widen_i8(const int8_t* p) {
  return bit_cast_vec<VecI32>(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VecU32 widen_u8(const uint8_t* p) {
  return bit_cast_vec<VecU32>(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VecU32 widen_u16(const uint16_t* p) {
  return bit_cast_vec<VecU32>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
inline VecF to_float(VecI32 v) { return bit_cast_vec<VecF>(_mm512_cvtepi32_ps(bit_cast_vec<__m512i>(v))); }
inline float hsum(VecF v) { return _mm512_reduce_add_ps(bit_cast_vec<__m512>(v)); }
}  // namespace

namespace pagoda::kernels::detail {
const KvRowOps& kv_row_ops_avx512() {
  static constexpr KvRowOps kOps = {enc_f16,      enc_bf16,          dec_f16,      dec_bf16,          dec_int8,  dec_e4m3,  dec_e5m2,
                                    dec_int4_row, dec_int4_channels, dot_group, axpy_group};
  return kOps;
}
}  // namespace pagoda::kernels::detail
