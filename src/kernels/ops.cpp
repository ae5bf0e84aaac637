#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace pagoda::kernels {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * n;
    float* yr = out + t * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

double rope_inv_freq(const RopeParams& params, int64_t i) {
  double f = params.freq_scale * std::pow(static_cast<double>(params.freq_base), -2.0 * i / params.rot_dim);
  if (!params.freq_factors.empty()) f /= params.freq_factors[i];
  return f;
}

void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, const RopeParams& params) {
  const int64_t hd = params.head_dim;
  const int64_t rot = params.rot_dim;
  CHECK(rot > 0 && rot <= hd && rot % 2 == 0) << "rot_dim " << rot << " head_dim " << hd;
  const int64_t half = rot / 2;
  CHECK(params.freq_factors.empty() || static_cast<int64_t>(params.freq_factors.size()) == half)
      << params.freq_factors.size() << " rope freq factors for " << half << " pairs";
  for (int64_t t = 0; t < n_tokens; ++t) {
    const double pos = static_cast<double>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * rope_inv_freq(params, i);
      const float c = static_cast<float>(std::cos(angle));
      const float s = static_cast<float>(std::sin(angle));
      for (int64_t h = 0; h < n_heads; ++h) {
        float* head = x + (t * n_heads + h) * hd;
        const int64_t a = params.style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        const int64_t b = params.style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
        const float x0 = head[a];
        const float x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
      }
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n, Isa isa) {
  if (isa >= Isa::kAvx512) return detail::silu_mul_avx512(gate, up, n);
  if (isa == Isa::kAvx2) return detail::silu_mul_avx2(gate, up, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

float exp_shifted_sum(float* x, int64_t n, float shift, Isa isa) {
  if (isa >= Isa::kAvx512) return detail::exp_shifted_sum_avx512(x, n, shift);
  if (isa == Isa::kAvx2) return detail::exp_shifted_sum_avx2(x, n, shift);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

float max_of(const float* x, int64_t n, float init, Isa isa) {
  if (isa >= Isa::kAvx512) return detail::max_of_avx512(x, n, init);
  if (isa == Isa::kAvx2) return detail::max_of_avx2(x, n, init);
  for (int64_t i = 0; i < n; ++i) init = std::max(init, x[i]);
  return init;
}

void gelu_mul(float* gate, const float* up, int64_t n, Isa isa) {
  if (isa >= Isa::kAvx512) return detail::gelu_mul_avx512(gate, up, n);
  if (isa == Isa::kAvx2) return detail::gelu_mul_avx2(gate, up, n);
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float u2 = -2.0f * kC * (g + 0.044715f * g * g * g);
    gate[i] = g / (1.0f + std::exp(u2)) * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max_value = x[0];
  for (int64_t i = 1; i < n; ++i) max_value = std::max(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace pagoda::kernels
