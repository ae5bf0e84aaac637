// ggml's k-quant block formats ("super-blocks" of QK_K = 256 values), exactly as GGUF stores
// them, with scalar references: dequantization (bit-exact with ggml's dequantize_row_q*_K),
// quantization (ggml's reference quantizers quantize_row_q*_K_ref: files we write hold what
// llama.cpp would write from the same f32 weights without an importance matrix), the Q8_K
// activation format and the integer dot product of a weight row with a Q8_K row.
//
//   Q4_K  { f16 d, dmin; u8 scales[12]; u8 qs[128]; }                      144 bytes
//     8 sub-blocks of 32 values; sub-block j has a 6-bit scale sc[j] and 6-bit min m[j] packed
//     in scales[12] (j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63; j >= 4: the low 4
//     bits in scales[j + 4] (sc low nibble, m high nibble), the high 2 bits in the top bits
//     of scales[j - 4] (sc) and scales[j] (m)).
//     Values 64c .. 64c + 31 are the low nibbles of qs[32c .. 32c + 31], values 64c + 32 ..
//     64c + 63 their high nibbles (c = 0..3); x = (d * sc[j]) * q - (dmin * m[j]), q in 0..15.
//   Q5_K  { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }           176 bytes
//     as Q4_K with q in 0..31: bit 4 of value 32j + l (sub-block j) is bit j of qh[l].
//   Q6_K  { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }                 210 bytes
//     16 sub-blocks of 16 values, x = (d * scales[v / 16]) * (q - 32), q in 0..63. In half h
//     (values 128h ..), for l in 0..31, with L = ql + 64h and H = qh + 32h:
//       value +l: L[l] & 15,  +32: L[l + 32] & 15,  +64: L[l] >> 4,  +96: L[l + 32] >> 4
//     with the two high bits taken from H[l] bits 0-1, 2-3, 4-5, 6-7 respectively.
//   Q8_K  { f32 d; i8 qs[256]; i16 bsums[16]; }                           292 bytes
//     activations only: x = d * qs, bsums[i] = sum of qs[16i .. 16i + 15].
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace pagoda::kernels {

constexpr int kQK_K = 256;  // values per k-quant super-block

struct BlockQ4_K {
  uint16_t d;     // f16 super-block scale of the scales
  uint16_t dmin;  // f16 super-block scale of the mins
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

inline bool is_kquant(DType dtype) { return dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K; }

// The 8 scales and 8 mins of a Q4_K / Q5_K super-block, unpacked from its 12 bytes.
void unpack_kquant_scales(const uint8_t packed[12], uint8_t sc[8], uint8_t m[8]);
// The same, 8 bytes at a time: *sc8 holds sc[0..7] (byte j = sc[j]), *m8 the mins.
inline void unpack_kquant_scales_u64(const uint8_t packed[12], uint64_t* sc8, uint64_t* m8) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  *sc8 = (u[0] & 0x3f3f3f3fu) | (static_cast<uint64_t>(sc_hi) << 32);
  *m8 = (u[1] & 0x3f3f3f3fu) | (static_cast<uint64_t>(m_hi) << 32);
}

// n a multiple of 256 (CHECKed). src: n / 256 blocks of `dtype` (a k-quant); dst: n floats.
void dequantize_row_kquant(DType dtype, const void* src, float* dst, int64_t n);
// src: n floats; dst: n / 256 blocks of `dtype`, as ggml's quantize_row_q*_K_ref.
void quantize_row_kquant(DType dtype, const float* src, void* dst, int64_t n);

// x: n floats -> n / 256 Q8_K blocks, as ggml's quantize_row_q8_K_ref (d = max / -127 of the
// value of largest magnitude, q = round-half-even(x / d)); an all-zero block gets d = 0.
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);

// The decode arithmetic, per super-block b, accumulated in float:
//   Q4_K/Q5_K: sum += (x.d * d) * sum_j sc[j] * dot_j  -  (x.d * dmin) * sum_j m[j] * xsum_j
//   Q6_K:      sum += (x.d * d) * sum_j scales[j] * dot_j(q - 32)
// with dot_j the integer dot of sub-block j's quants with x's quants and xsum_j the sum of
// x's quants over sub-block j (from bsums). Fast kernels must match it to float rounding.
float dot_kquant_q8k(DType dtype, const void* w_row, const BlockQ8_K* x, int64_t n);

}  // namespace pagoda::kernels
