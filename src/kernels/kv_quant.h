// Quantized KV element formats: exact conversions, the row quantizers store_kv uses, and the
// row decoders paged attention uses (scalar = the reference; AVX2/AVX-512 tested against it).
// Where the codes and scales sit inside a block: kernels/attention.h.
//
// One row is the head_dim values x[0..n) of one (token, kv head). Scales and mins are f16.
// f16_up / f16_down round toward +inf / -inf, so that no in-range value needs clamping;
// a zero scale (an all-zero row) stores codes 0.
//
//   int8      symmetric: s = f16_up(amax / 127); c = clamp(rne(x / s), -127, 127); x^ = s*c
//             |x - x^| <= s/2 <= amax/254 * (1 + 2^-10) + 2^-25
//   fp8-e4m3  s = f16_up(amax / 448); c = e4m3(x / s); x^ = s * float(c)
//             |x - x^| <= 2^-4 |x| + 2^-10 s
//   fp8-e5m2  s = f16_up(amax / 57344); c = e5m2(x / s); x^ = s * float(c)
//             |x - x^| <= 2^-3 |x| + 2^-17 s
//   int4      asymmetric: m = f16_down(min), s = f16_up((max - m) / 15),
//             c = clamp(rne((x - m) / s), 0, 15); x^ = s*c + m
//             |x - x^| <= s/2 <= ((max - min)(1 + 2^-9) + |min| 2^-9) / 30 + 2^-24
//             V: min/max over the row (per token, head). K: per channel, min/max over the
//             B rows of a block (KIVI) -- see the staging rules in kernels/kv_store.h.
//             Nibbles: byte j of a row holds element j (low) and element j + n/2 (high).
//
// FP8 conversions (OCP FP8 formats) round to nearest even:
//   e4m3 (bias 7, no inf): saturates to +-448 (also for +-inf); NaN -> 0x7f.
//   e5m2 (bias 15): finite values beyond +-57344 saturate to +-57344 ("satfinite");
//        +-inf stays inf, NaN stays NaN. Since store_kv scales amax to the format's max, the
//        cache never holds inf or NaN codes for finite inputs; the fast decoders assume that.
// Preconditions: finite inputs; scales saturate at the f16 max (65504), so |x| must stay
// below 65504 * 127 (int8), 65504 * 448 (e4m3), 65504 (int4 min/max).
#pragma once

#include <cstdint>

#include "kernels/kv_format.h"
#include "kernels/matmul.h"

namespace pagoda::kernels {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

uint8_t fp32_to_e4m3(float x);
float e4m3_to_fp32(uint8_t code);
uint8_t fp32_to_e5m2(float x);
float e5m2_to_fp32(uint8_t code);
uint16_t fp32_to_fp16_up(float x);    // toward +inf; finite x saturates at +-65504
uint16_t fp32_to_fp16_down(float x);  // toward -inf; finite x saturates at +-65504

// Row quantizers (scalar; the reference and what store_kv runs). codes: [n] bytes (int4:
// [n/2]); scale / scale_min are written as f16 bit patterns.
void quantize_row_int8(const float* x, int64_t n, int8_t* codes, uint16_t* scale);
void quantize_row_fp8(KvDType dtype, const float* x, int64_t n, uint8_t* codes, uint16_t* scale);
void quantize_row_int4(const float* x, int64_t n, uint8_t* codes, uint16_t* scale, uint16_t* min);
// int4 per channel over `rows` rows: x row r at x + r * x_stride, its codes at
// codes + r * code_stride; scale, min: [n] (f16). n even.
void quantize_channels_int4(const float* x, int64_t rows, int64_t x_stride, int64_t n, uint8_t* codes,
                            int64_t code_stride, uint16_t* scale, uint16_t* min);

// Per-row kernels of paged attention. Decoders: out[0..n) = the dequantized values (pointers
// to codes may be unaligned). Group kernels: one K (V) row against g <= 8 query heads.
struct KvRowOps {
  // Encoders (store_kv): out[0..n) = fp32_to_fp16 / fp32_to_bf16 of x, bit for bit (nearest
  // even; the scalar functions' NaN codes).
  void (*enc_f16)(const float* x, uint16_t* out, int64_t n);
  void (*enc_bf16)(const float* x, uint16_t* out, int64_t n);
  void (*f16)(const uint16_t* codes, float* out, int64_t n);
  void (*bf16)(const uint16_t* codes, float* out, int64_t n);
  void (*int8)(const int8_t* codes, float scale, float* out, int64_t n);
  void (*e4m3)(const uint8_t* codes, float scale, float* out, int64_t n);
  void (*e5m2)(const uint8_t* codes, float scale, float* out, int64_t n);
  // int4 with one scale and min for the row (V): out = scale * c + min.
  void (*int4_row)(const uint8_t* codes, float scale, float min, float* out, int64_t n);
  // int4 with a scale and min per element (K, per channel): out[i] = scale[i] * c[i] + min[i].
  void (*int4_channels)(const uint8_t* codes, const float* scale, const float* min, float* out, int64_t n);
  // out[j * out_stride] = scale * sum_i k[i] * q[j * n + i] for j < g (q: [g, n]).
  void (*dot_group)(const float* k, const float* q, int64_t g, int64_t n, float scale, float* out, int64_t out_stride);
  // acc[j * n + i] += w[j] * v[i] for j < g, i < n (acc: [g, n]).
  void (*axpy_group)(const float* w, const float* v, int64_t g, int64_t n, float* acc);
};
inline constexpr int64_t kKvMaxGroup = 8;  // largest g of the group kernels

// Isa::kScalar gives the reference table (the SIMD group kernels sum in another order). `isa` must be one this CPU runs.
const KvRowOps& kv_row_ops(Isa isa);

namespace detail {
const KvRowOps& kv_row_ops_avx2();
const KvRowOps& kv_row_ops_avx512();
}  // namespace detail

}  // namespace pagoda::kernels
