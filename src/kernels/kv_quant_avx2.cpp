#include "core/dtype.h"
#include "kernels/kv_quant.h"

constexpr int kLanes = 8;
#include "kernels/kv_quant_simd.inc"

namespace {
template <typename To, typename From>
inline To bit_cast_vec(From v) {
  To out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
inline VecF load_f16(const uint16_t* p) {
  return bit_cast_vec<VecF>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline void store_f16(uint16_t* p, VecF v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(bit_cast_vec<__m256>(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store_narrow_u16(uint16_t* p, VecU32 v) {  // every lane < 2^16
  const __m256i w = bit_cast_vec<__m256i>(v);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
}
inline VecI32 widen_i8(const int8_t* p) {
  return bit_cast_vec<VecI32>(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline VecU32 widen_u8(const uint8_t* p) {
  return bit_cast_vec<VecU32>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline VecU32 widen_u16(const uint16_t* p) {
  return bit_cast_vec<VecU32>(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VecF to_float(VecI32 v) { return bit_cast_vec<VecF>(_mm256_cvtepi32_ps(bit_cast_vec<__m256i>(v))); }
inline float hsum(VecF v) {
  const __m256 x = bit_cast_vec<__m256>(v);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
}  // namespace

namespace pagoda::kernels::detail {
const KvRowOps& kv_row_ops_avx2() {
  static constexpr KvRowOps kOps = {enc_f16,      enc_bf16,          dec_f16,      dec_bf16,          dec_int8,  dec_e4m3,  dec_e5m2,
                                    dec_int4_row, dec_int4_channels, dot_group, axpy_group};
  return kOps;
}
}  // namespace pagoda::kernels::detail
