// The k-quant weight quantizers: ggml's reference algorithms (quantize_row_q{4,5,6}_K_ref,
// without an importance matrix), re-implemented from their definition, with the same float
// evaluation order so that the bytes match what llama.cpp writes (up to FMA contraction,
// which this file is compiled without).
//
// Q4_K / Q5_K: each sub-block of 32 gets the (scale, min) fit of `fit_scale_min` (ggml's
//   make_qkx2_quants: weighted least squares over a sweep of candidate scales, weights
//   sqrt(mean x^2) + |x|); the 8 scales and 8 mins are then quantized to 6 bits against the
//   largest of each (d = max_scale / 63, dmin = max_min / 63) and the quants recomputed
//   from the quantized scales.
// Q6_K: each sub-block of 16 gets a signed scale from `fit_symmetric` (ggml's make_qx_quants,
//   rmse_type 1: weights x^2, 18 candidate scales around nmax / max); the 16 scales become
//   int8 against the one of largest magnitude (d = max_scale / -128).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kquant.h"
#include "kernels/kquant_internal.h"

namespace pagoda::kernels {

namespace {

using detail::nearest_int;

constexpr float kGroupMaxEps = 1e-15f;

// Fits x[i] ~ scale * L[i] - the_min, L[i] in 0..nmax, minimising sum w[i] * err^2.
// Returns scale, writes L and *the_min (>= 0).
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min, uint8_t* Laux,
                    float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = x[i] < min ? x[i] : min;
    max = x[i] > max ? x[i] : max;
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float scaled = scale * static_cast<float>(L[i]);
    const float diff = scaled + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    const float step = rdelta * static_cast<float>(is);
    iscale = (rmin + step + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float wl = w[i] * static_cast<float>(l);
      sum_l += wl;
      sum_l2 += wl * static_cast<float>(l);
      sum_xl += wl * x[i];
    }
    const float a = sum_w * sum_l2, b = sum_l * sum_l;
    const float D = a - b;
    if (D > 0) {
      const float p1 = sum_w * sum_xl, p2 = sum_x * sum_l;
      const float p3 = sum_l2 * sum_x, p4 = sum_l * sum_xl;
      float this_scale = (p1 - p2) / D;
      float this_min = (p3 - p4) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float scaled = this_scale * static_cast<float>(Laux[i]);
        const float diff = scaled + this_min - x[i];
        cur_error += w[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Fits x[i] ~ scale * (L[i] - nmax), L[i] - nmax in [-nmax, nmax - 1], weights x^2.
// Returns scale (signed), writes L (0 .. 2 nmax - 1).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  auto quant = [nmax](float iscale, float v) { return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * v))); };
  // Weighted sums of x * l and l^2 for one candidate iscale.
  auto sums = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(quant(iscale, x[i]));
      const float w = x[i] * x[i];
      sumlx += (w * x[i]) * l;
      suml2 += (w * l) * l;
    }
  };
  float iscale = static_cast<float>(-nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(quant(iscale, x[i]) + nmax);
  float sumlx, suml2;
  sums(iscale, sumlx, suml2);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sums(iscale, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(quant(iscale, x[i]) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q4_K (nmax 15, qh == nullptr) or Q5_K (nmax 31): scales, d, dmin and quants L[256].
void quantize_q45_block(const float* x, int nmax, uint8_t* scales, uint16_t* d16, uint16_t* dmin16, uint8_t* L) {
  const float rmin = nmax == 15 ? -1.0f : -0.5f;
  const int nstep = nmax == 15 ? 20 : 15;
  float sub_scales[8], sub_mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    sub_scales[j] = fit_scale_min(32, nmax, xs, weights, L + 32 * j, &sub_mins[j], Laux, rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, sub_scales[j]);
    max_min = std::max(max_min, sub_mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int into a uint8_t before clamping: keep its wrap-around.
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * sub_scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * sub_mins[j])));
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0x0f) | ((lm & 0x0f) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d16 = fp32_to_fp16(max_scale / 63.0f);
  *dmin16 = fp32_to_fp16(max_min / 63.0f);
  uint8_t sc[8], m[8];
  unpack_kquant_scales(scales, sc, m);
  for (int j = 0; j < 8; ++j) {
    const float d = fp16_to_fp32(*d16) * static_cast<float>(sc[j]);
    if (d == 0.0f) continue;  // keeps the fit's quants, as ggml does
    const float dm = fp16_to_fp32(*dmin16) * static_cast<float>(m[j]);
    for (int l = 0; l < 32; ++l) {
      const int q = nearest_int((x[32 * j + l] + dm) / d);
      L[32 * j + l] = static_cast<uint8_t>(std::max(0, std::min(nmax, q)));
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_q45_block(x, 15, y[b].scales, &y[b].d, &y[b].dmin, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_q45_block(x, 31, y[b].scales, &y[b].d, &y[b].dmin, L);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        y[b].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
    BlockQ6_K& blk = y[b];
    int8_t L[kQK_K];
    float sub_scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      sub_scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(sub_scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(sub_scales[j]);
        max_scale = sub_scales[j];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    blk.d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * sub_scales[j])));
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(blk.d) * static_cast<float>(blk.scales[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int(x[16 * j + l] / d);
        L[16 * j + l] = static_cast<int8_t>(std::max(-32, std::min(31, q)) + 32);
      }
    }
    for (int half = 0; half < 2; ++half) {
      const int8_t* Lh = L + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        blk.ql[64 * half + l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
        blk.ql[64 * half + l + 32] = static_cast<uint8_t>((q2 & 15) | ((q4 & 15) << 4));
        blk.qh[32 * half + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace

void quantize_row_kquant(DType dtype, const float* src, void* dst, int64_t n) {
  CHECK_EQ(n % kQK_K, 0);
  switch (dtype) {
    case DType::kQ4_K:
      return quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n / kQK_K);
    case DType::kQ5_K:
      return quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n / kQK_K);
    case DType::kQ6_K:
      return quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQK_K);
    default:
      CHECK(false) << "quantize_row_kquant: " << dtype_name(dtype) << " is not a k-quant";
  }
}

}  // namespace pagoda::kernels
