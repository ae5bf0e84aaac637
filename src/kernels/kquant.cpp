// k-quant scalar references: dequantization, Q8_K activations and the decode dot products.
// The quantizers of weights are in kquant_quantize.cpp.
#include "kernels/kquant.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kquant_internal.h"

namespace pagoda::kernels {

void unpack_kquant_scales(const uint8_t packed[12], uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = packed[j] & 63;
    m[j] = packed[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4));
    m[j] = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

namespace {

// Quant q (0..31) of value v of a Q4_K (no qh) or Q5_K super-block.
inline int q45_value(const uint8_t* qs, const uint8_t* qh, int v) {
  const int chunk = v / 64, l = v % 32;
  const bool high = (v % 64) >= 32;
  int q = high ? (qs[32 * chunk + l] >> 4) : (qs[32 * chunk + l] & 15);
  if (qh != nullptr && (qh[l] >> (v / 32)) & 1) q += 16;
  return q;
}

// Quant q (0..63, stored with +32) of value v of a Q6_K super-block.
inline int q6_value(const BlockQ6_K& blk, int v) {
  const int half = v / 128, group = (v % 128) / 32, l = v % 32;
  const uint8_t* ql = blk.ql + 64 * half;
  const uint8_t* qh = blk.qh + 32 * half;
  const uint8_t low = group % 2 == 0 ? ql[l] : ql[l + 32];
  const int nibble = group < 2 ? (low & 15) : (low >> 4);
  return nibble | (((qh[l] >> (2 * group)) & 3) << 4);
}

// Q4_K (qh == nullptr) or Q5_K: x = (d * sc) * q - (dmin * m), each product rounded to f32.
// Loops in the format's own order (64-value chunks, low then high nibbles) so they vectorize.
void dequantize_q45(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
                    float* out) {
  const float d = fp16_to_fp32(d16);
  const float dmin = fp16_to_fp32(dmin16);
  uint8_t sc[8], m[8];
  unpack_kquant_scales(scales, sc, m);
  for (int c = 0; c < 4; ++c) {
    const float d1 = d * static_cast<float>(sc[2 * c]), m1 = dmin * static_cast<float>(m[2 * c]);
    const float d2 = d * static_cast<float>(sc[2 * c + 1]), m2 = dmin * static_cast<float>(m[2 * c + 1]);
    const uint8_t* q = qs + 32 * c;
    float* y = out + 64 * c;
    for (int l = 0; l < 32; ++l) {
      const int hi1 = qh != nullptr ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
      const float scaled = d1 * static_cast<float>((q[l] & 15) | hi1);
      y[l] = scaled - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int hi2 = qh != nullptr ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
      const float scaled = d2 * static_cast<float>((q[l] >> 4) | hi2);
      y[32 + l] = scaled - m2;
    }
  }
}

void dequantize_q6(const BlockQ6_K& blk, float* out) {
  const float d = fp16_to_fp32(blk.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = blk.ql + 64 * half;
    const uint8_t* qh = blk.qh + 32 * half;
    const int8_t* sc = blk.scales + 8 * half;
    float* y = out + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      const float s1 = d * static_cast<float>(sc[is]), s2 = d * static_cast<float>(sc[is + 2]);
      const float s3 = d * static_cast<float>(sc[is + 4]), s4 = d * static_cast<float>(sc[is + 6]);
      y[l] = s1 * static_cast<float>(q1);
      y[l + 32] = s2 * static_cast<float>(q2);
      y[l + 64] = s3 * static_cast<float>(q3);
      y[l + 96] = s4 * static_cast<float>(q4);
    }
  }
}

// Integer parts of one super-block's dot with a Q8_K block: main = sum over sub-blocks of
// scale * dot(quants, x), offset = the term multiplied by dmin (Q4_K/Q5_K) or 0 (Q6_K, whose
// -32 offset is folded into main).
struct BlockDot {
  int32_t main = 0;
  int32_t offset = 0;
};

BlockDot block_dot_q45(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, const BlockQ8_K& x) {
  uint8_t sc[8], m[8];
  unpack_kquant_scales(scales, sc, m);
  BlockDot r;
  for (int j = 0; j < 8; ++j) {
    int32_t dot = 0;
    for (int l = 0; l < 32; ++l) dot += q45_value(qs, qh, 32 * j + l) * static_cast<int32_t>(x.qs[32 * j + l]);
    r.main += static_cast<int32_t>(sc[j]) * dot;
    r.offset += static_cast<int32_t>(m[j]) * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return r;
}

BlockDot block_dot_q6(const BlockQ6_K& blk, const BlockQ8_K& x) {
  BlockDot r;
  for (int j = 0; j < 16; ++j) {
    int32_t dot = 0;
    for (int l = 0; l < 16; ++l) dot += (q6_value(blk, 16 * j + l) - 32) * static_cast<int32_t>(x.qs[16 * j + l]);
    r.main += static_cast<int32_t>(blk.scales[j]) * dot;
  }
  return r;
}

}  // namespace

void dequantize_row_kquant(DType dtype, const void* src, float* dst, int64_t n) {
  CHECK_EQ(n % kQK_K, 0);
  const int64_t nb = n / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    float* out = dst + b * kQK_K;
    switch (dtype) {
      case DType::kQ4_K: {
        const auto& blk = static_cast<const BlockQ4_K*>(src)[b];
        dequantize_q45(blk.d, blk.dmin, blk.scales, blk.qs, nullptr, out);
        break;
      }
      case DType::kQ5_K: {
        const auto& blk = static_cast<const BlockQ5_K*>(src)[b];
        dequantize_q45(blk.d, blk.dmin, blk.scales, blk.qs, blk.qh, out);
        break;
      }
      case DType::kQ6_K:
        dequantize_q6(static_cast<const BlockQ6_K*>(src)[b], out);
        break;
      default:
        CHECK(false) << "dequantize_row_kquant: " << dtype_name(dtype) << " is not a k-quant";
    }
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  CHECK_EQ(n % kQK_K, 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& blk = y[b];
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK_K; ++i) {
      const float ax = std::fabs(xb[i]);
      if (ax > amax) {
        amax = ax;
        max = xb[i];
      }
    }
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQK_K; ++i) {
      const int v = detail::nearest_int(iscale * xb[i]);
      blk.qs[i] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk.qs[16 * g + i];
      blk.bsums[g] = static_cast<int16_t>(sum);
    }
    blk.d = 1.0f / iscale;
  }
}

float dot_kquant_q8k(DType dtype, const void* w_row, const BlockQ8_K* x, int64_t n) {
  CHECK_EQ(n % kQK_K, 0);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockDot dot;
    float d = 0.0f, dmin = 0.0f;
    switch (dtype) {
      case DType::kQ4_K: {
        const auto& blk = static_cast<const BlockQ4_K*>(w_row)[b];
        dot = block_dot_q45(blk.scales, blk.qs, nullptr, x[b]);
        d = fp16_to_fp32(blk.d);
        dmin = fp16_to_fp32(blk.dmin);
        break;
      }
      case DType::kQ5_K: {
        const auto& blk = static_cast<const BlockQ5_K*>(w_row)[b];
        dot = block_dot_q45(blk.scales, blk.qs, blk.qh, x[b]);
        d = fp16_to_fp32(blk.d);
        dmin = fp16_to_fp32(blk.dmin);
        break;
      }
      case DType::kQ6_K: {
        const auto& blk = static_cast<const BlockQ6_K*>(w_row)[b];
        dot = block_dot_q6(blk, x[b]);
        d = fp16_to_fp32(blk.d);
        break;
      }
      default:
        CHECK(false) << "dot_kquant_q8k: " << dtype_name(dtype) << " is not a k-quant";
    }
    const float dd = x[b].d * d;
    const float dm = x[b].d * dmin;
    sum += dd * static_cast<float>(dot.main) - dm * static_cast<float>(dot.offset);
  }
  return sum;
}

}  // namespace pagoda::kernels
