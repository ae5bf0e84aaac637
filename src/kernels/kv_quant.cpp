#include "kernels/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace pagoda::kernels {

namespace {

// An FP8 format with `man_bits` mantissa bits and the given bias, max finite `max_finite`.
struct Fp8Format {
  int man_bits;
  int bias;
  float max_finite;
};
constexpr Fp8Format kE4M3{3, 7, kE4M3Max};
constexpr Fp8Format kE5M2{2, 15, kE5M2Max};

// Encodes |x| (finite, not NaN) rounded to nearest even; returns the 7-bit magnitude code.
// Values beyond max_finite saturate to it.
uint8_t encode_fp8_magnitude(float a, const Fp8Format& f) {
  const int emin = 1 - f.bias;  // exponent of the smallest normal
  if (a == 0.0f) return 0;
  int e = std::ilogb(a);
  if (e < emin) e = emin;                              // subnormal range: fixed quantum
  const float quantum = std::ldexp(1.0f, e - f.man_bits);
  float r = std::nearbyint(a / quantum) * quantum;     // exact scaling; nearbyint is RNE
  if (r > f.max_finite) r = f.max_finite;
  if (r == 0.0f) return 0;
  int er = std::ilogb(r);
  if (er < emin) {  // subnormal: exponent field 0
    return static_cast<uint8_t>(std::ldexp(r, f.man_bits - emin));
  }
  const int mant = static_cast<int>(std::ldexp(r, f.man_bits - er)) - (1 << f.man_bits);
  return static_cast<uint8_t>(((er + f.bias) << f.man_bits) | mant);
}

float decode_fp8(uint8_t code, const Fp8Format& f) {
  const int mag = code & 0x7f;
  const int e = mag >> f.man_bits;
  const int m = mag & ((1 << f.man_bits) - 1);
  float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - f.bias - f.man_bits)
                   : std::ldexp(static_cast<float>((1 << f.man_bits) + m), e - f.bias - f.man_bits);
  return (code & 0x80) ? -v : v;
}

inline uint16_t f16_bits_of_scale(float s) { return fp32_to_fp16_up(s); }

float amax_of(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

inline void put_nibble(uint8_t* codes, int64_t n, int64_t i, int c) {
  const int64_t half = n / 2;
  if (i < half) {
    codes[i] = static_cast<uint8_t>((codes[i] & 0xf0) | c);
  } else {
    codes[i - half] = static_cast<uint8_t>((codes[i - half] & 0x0f) | (c << 4));
  }
}

inline int int4_code(float x, float m, float s) {
  if (s == 0.0f) return 0;
  return static_cast<int>(std::clamp(std::nearbyint((x - m) / s), 0.0f, 15.0f));
}

// Asymmetric int4 parameters of values in [lo, hi]: m = f16_down(lo), s = f16_up((hi - m) / 15).
void int4_params(float lo, float hi, uint16_t* scale, uint16_t* min) {
  *min = fp32_to_fp16_down(lo);
  const float m = fp16_to_fp32(*min);
  *scale = f16_bits_of_scale((hi - m) / 15.0f);
}

// ---- scalar encoders and decoders: the reference ----
void enc_f16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}
void enc_bf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(x[i]);
}
void dec_f16(const uint16_t* c, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, c + i, 2);
    out[i] = fp16_to_fp32(h);
  }
}
void dec_bf16(const uint16_t* c, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, c + i, 2);
    out[i] = bf16_to_fp32(h);
  }
}
void dec_int8(const int8_t* c, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>(c[i]);
}
void dec_e4m3(const uint8_t* c, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * e4m3_to_fp32(c[i]);
}
void dec_e5m2(const uint8_t* c, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * e5m2_to_fp32(c[i]);
}
void dec_int4_row(const uint8_t* c, float scale, float min, float* out, int64_t n) {
  const int64_t half = n / 2;
  for (int64_t j = 0; j < half; ++j) {
    out[j] = scale * static_cast<float>(c[j] & 15) + min;
    out[j + half] = scale * static_cast<float>(c[j] >> 4) + min;
  }
}
void dec_int4_channels(const uint8_t* c, const float* scale, const float* min, float* out, int64_t n) {
  const int64_t half = n / 2;
  for (int64_t j = 0; j < half; ++j) {
    out[j] = scale[j] * static_cast<float>(c[j] & 15) + min[j];
    out[j + half] = scale[j + half] * static_cast<float>(c[j] >> 4) + min[j + half];
  }
}

void dot_group(const float* k, const float* q, int64_t g, int64_t n, float scale, float* out, int64_t out_stride) {
  CHECK_LE(g, kKvMaxGroup);
  for (int64_t j = 0; j < g; ++j) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += k[i] * q[j * n + i];
    out[j * out_stride] = scale * sum;
  }
}
void axpy_group(const float* w, const float* v, int64_t g, int64_t n, float* acc) {
  CHECK_LE(g, kKvMaxGroup);
  for (int64_t j = 0; j < g; ++j) {
    for (int64_t i = 0; i < n; ++i) acc[j * n + i] += w[j] * v[i];
  }
}

constexpr KvRowOps kScalarOps = {enc_f16, enc_bf16, dec_f16,  dec_bf16,      dec_int8,          dec_e4m3, dec_e5m2,
                                 dec_int4_row, dec_int4_channels, dot_group, axpy_group};

}  // namespace

uint8_t fp32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  return sign | encode_fp8_magnitude(std::isinf(a) ? kE4M3Max : a, kE4M3);
}

float e4m3_to_fp32(uint8_t code) {
  if ((code & 0x7f) == 0x7f) return std::nanf("");
  return decode_fp8(code, kE4M3);
}

uint8_t fp32_to_e5m2(float x) {
  if (std::isnan(x)) return 0x7e;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isinf(x)) return sign | 0x7c;
  return sign | encode_fp8_magnitude(std::fabs(x), kE5M2);
}

float e5m2_to_fp32(uint8_t code) { return fp16_to_fp32(static_cast<uint16_t>(code) << 8); }

uint16_t fp32_to_fp16_up(float x) {
  uint16_t h = fp32_to_fp16(x);
  if (std::isnan(x)) return h;
  const float back = fp16_to_fp32(h);
  if (back < x) {  // step one f16 ulp toward +inf
    if (h == 0x8000 || h == 0x0000) h = 0x0001;
    else if (h & 0x8000) --h;
    else ++h;
  }
  if (std::isfinite(x)) {
    if (h == 0x7c00) h = 0x7bff;  // saturate at +65504
    if (h == 0xfc00) h = 0xfbff;
  }
  return h;
}

uint16_t fp32_to_fp16_down(float x) { return static_cast<uint16_t>(fp32_to_fp16_up(-x) ^ 0x8000); }

void quantize_row_int8(const float* x, int64_t n, int8_t* codes, uint16_t* scale) {
  *scale = f16_bits_of_scale(amax_of(x, n) / 127.0f);
  const float s = fp16_to_fp32(*scale);
  for (int64_t i = 0; i < n; ++i) {
    codes[i] = s == 0.0f ? 0 : static_cast<int8_t>(std::clamp(std::nearbyint(x[i] / s), -127.0f, 127.0f));
  }
}

void quantize_row_fp8(KvDType dtype, const float* x, int64_t n, uint8_t* codes, uint16_t* scale) {
  CHECK(dtype == KvDType::kFp8E4M3 || dtype == KvDType::kFp8E5M2) << "not an fp8 KV dtype";
  const bool e4m3 = dtype == KvDType::kFp8E4M3;
  *scale = f16_bits_of_scale(amax_of(x, n) / (e4m3 ? kE4M3Max : kE5M2Max));
  const float s = fp16_to_fp32(*scale);
  for (int64_t i = 0; i < n; ++i) {
    if (s == 0.0f) {
      codes[i] = 0;
    } else {
      const float y = x[i] / s;
      codes[i] = e4m3 ? fp32_to_e4m3(y) : fp32_to_e5m2(std::clamp(y, -kE5M2Max, kE5M2Max));
    }
  }
}

void quantize_row_int4(const float* x, int64_t n, uint8_t* codes, uint16_t* scale, uint16_t* min) {
  CHECK_EQ(n % 2, 0);
  float lo = x[0], hi = x[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  int4_params(lo, hi, scale, min);
  const float s = fp16_to_fp32(*scale), m = fp16_to_fp32(*min);
  for (int64_t i = 0; i < n; ++i) put_nibble(codes, n, i, int4_code(x[i], m, s));
}

void quantize_channels_int4(const float* x, int64_t rows, int64_t x_stride, int64_t n, uint8_t* codes,
                            int64_t code_stride, uint16_t* scale, uint16_t* min) {
  CHECK_EQ(n % 2, 0);
  CHECK_GT(rows, 0);
  for (int64_t i = 0; i < n; ++i) {
    float lo = x[i], hi = x[i];
    for (int64_t r = 1; r < rows; ++r) {
      lo = std::min(lo, x[r * x_stride + i]);
      hi = std::max(hi, x[r * x_stride + i]);
    }
    uint16_t s16, m16;
    int4_params(lo, hi, &s16, &m16);
    std::memcpy(scale + i, &s16, 2);  // scale/min may be unaligned inside a block
    std::memcpy(min + i, &m16, 2);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t s16, m16;
      std::memcpy(&s16, scale + i, 2);
      std::memcpy(&m16, min + i, 2);
      put_nibble(codes + r * code_stride, n, i, int4_code(x[r * x_stride + i], fp16_to_fp32(m16), fp16_to_fp32(s16)));
    }
  }
}

const KvRowOps& kv_row_ops(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
    case Isa::kAmx: return detail::kv_row_ops_avx512();
    case Isa::kAvx2: return detail::kv_row_ops_avx2();
    case Isa::kScalar: break;
  }
  return kScalarOps;
}

}  // namespace pagoda::kernels
