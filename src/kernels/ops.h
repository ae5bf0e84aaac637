// Element-wise and row-wise ops of a transformer layer. Scalar code on purpose: they are a
// few percent of a step next to matmul and attention; each is its own reference. silu_mul
// alone has an AVX-512 path (its libm expf was 2.7% of a 16-sequence decode step).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace pagoda::kernels {

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]
// x, out: [n_tokens, n]; weight: [n]. out may alias x.
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);

enum class RopeStyle {
  kAdjacentPairs,  // rotate (x[2i], x[2i+1]): llama2.c, GGUF "llama" (GGML_ROPE_TYPE_NORM)
  kNeoxHalves,     // rotate (x[i], x[i + rot/2]): GPT-NeoX, Qwen2 (GGML_ROPE_TYPE_NEOX)
};

struct RopeParams {
  RopeStyle style = RopeStyle::kAdjacentPairs;
  int64_t head_dim = 0;
  int64_t rot_dim = 0;        // dims rotated per head (<= head_dim), the rest pass through
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;    // linear position scaling (1 = none)
  // [rot_dim / 2] or empty: pair i's frequency is divided by freq_factors[i] (llama.cpp's
  // rope_freqs tensor; Llama 3 rope scaling).
  std::vector<float> freq_factors;
};

// Inverse frequency of pair i: freq_scale * freq_base^(-2i / rot_dim) / freq_factors[i].
double rope_inv_freq(const RopeParams& params, int64_t i);

// Rotates x in place. x: [n_tokens, n_heads, head_dim]; positions: [n_tokens].
// Angle for pair i at position p: p * rope_inv_freq(params, i).
void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, const RopeParams& params);

// gate[i] = silu(gate[i]) * up[i] over n values (in place in gate). Isa::kAvx2 and up: exp as
// detail::exp256 / exp512 (within 2 ulp of expf), the rest in the same order; scalar: the
// reference.
void silu_mul(float* gate, const float* up, int64_t n, Isa isa = detect_isa());
namespace detail {
void silu_mul_avx512(float* gate, const float* up, int64_t n);
void silu_mul_avx2(float* gate, const float* up, int64_t n);
void gelu_mul_avx512(float* gate, const float* up, int64_t n);
void gelu_mul_avx2(float* gate, const float* up, int64_t n);
}

// gate[i] = gelu(gate[i]) * up[i] (GeGLU, Gemma's FFN), gelu the tanh approximation:
//   gelu(g) = g/2 (1 + tanh(u)) = g / (1 + exp(-2u)),  u = sqrt(2/pi) (g + 0.044715 g^3)
// computed in the second form (no tanh: the same exp as silu_mul, so the same ISA paths and the
// same 2-ulp bound; for g < about -10, exp(-2u) overflows to inf and the result is -0, as
// tanh gives within float precision). Scalar: the reference.
void gelu_mul(float* gate, const float* up, int64_t n, Isa isa = detect_isa());

// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t n);

// In-place softmax of x[0..n). Returns nothing; max-subtracted, sums in float.
void softmax(float* x, int64_t n);

// The unnormalized softmax of an online-softmax tile row: x[i] = exp(x[i] - shift) for
// i < n, returning their sum (float). Isa::kAvx2 and up: detail::exp256 / exp512 (within 2 ulp
// of expf) and lane-wise partial sums; scalar: std::exp in order, the reference.
float exp_shifted_sum(float* x, int64_t n, float shift, Isa isa = detect_isa());
// max(init, x[0..n)).
float max_of(const float* x, int64_t n, float init, Isa isa = detect_isa());
namespace detail {
float exp_shifted_sum_avx512(float* x, int64_t n, float shift);
float exp_shifted_sum_avx2(float* x, int64_t n, float shift);
float max_of_avx512(const float* x, int64_t n, float init);
float max_of_avx2(const float* x, int64_t n, float init);
}

}  // namespace pagoda::kernels
