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
void dequantize_q45(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
                    float* out) {
  const float d = fp16_to_fp32(d16);
  const float dmin = fp16_to_fp32(dmin16);
  uint8_t sc[8], m[8];
  unpack_kquant_scales(scales, sc, m);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * static_cast<float>(sc[j]);
    const float mj = dmin * static_cast<float>(m[j]);
    for (int l = 0; l < 32; ++l) {
      const float scaled = dj * static_cast<float>(q45_value(qs, qh, 32 * j + l));
      out[32 * j + l] = scaled - mj;
    }
  }
}

void dequantize_q6(const BlockQ6_K& blk, float* out) {
  const float d = fp16_to_fp32(blk.d);
  for (int v = 0; v < kQK_K; ++v) {
    const float ds = d * static_cast<float>(blk.scales[v / 16]);
    out[v] = ds * static_cast<float>(q6_value(blk, v) - 32);
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
