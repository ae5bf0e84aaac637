// Internal to src/kernels: the per-ISA kernel tables behind `Matmul` (matmul.h).
//
// Each table is compiled in its own file (matmul.cpp: scalar, matmul_avx2.cpp,
// matmul_avx512.cpp) with that ISA's flags; `matmul_kernels(isa)` must only be asked for an
// ISA the CPU runs. Every table is tested against matmul_decode_reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kquant.h"
#include "kernels/matmul.h"

namespace pagoda::kernels::detail {

// Token lanes of the per-block x arrays below: decode batches have < kBlasMinTokens tokens.
constexpr int64_t kDecodeLanes = 8;
static_assert(Matmul::kBlasMinTokens <= kDecodeLanes);

// Activations as the decode kernels read them.
//   F32/F16/BF16 weights: only `f32` is set.
//   Q8_0/Q4_0 weights: x quantized to Q8_0 blocks (exactly quantize_row(kQ8_0)), split up:
//     qs[t * n_in + i]            quant of x[t, i]
//     d[b * kDecodeLanes + t]     scale of block b of token t (the f16 value, as f32)
//     ds[b * kDecodeLanes + t]    d * sum of that block's quants (offset corrections)
//   extra: whatever else the ISA's kernels precompute from the above (prepare_extra).
//   Q4_K/Q5_K/Q6_K weights: x quantized to Q8_K blocks (exactly quantize_row_q8_k), `q8k`.
struct DecodeX {
  const float* f32 = nullptr;   // [n_tokens, n_in]
  const int8_t* qs = nullptr;   // [n_tokens, n_in]
  const float* d = nullptr;     // [n_in / 32, kDecodeLanes]
  const float* ds = nullptr;    // [n_in / 32, kDecodeLanes]
  const void* extra = nullptr;  // extra_bytes(n_tokens, n_in) bytes, 64-byte aligned
  const BlockQ8_K* q8k = nullptr;  // [n_tokens, n_in / 256], k-quant weights only
  int64_t n_tokens = 0;         // 1 .. kDecodeLanes - 1
  int64_t n_in = 0;
};

struct MatmulKernels {
  // x: n floats (n % 32 == 0) -> qs [n], d and ds at b * lane_stride for block b.
  void (*quantize_x)(const float* x, int64_t n, int8_t* qs, float* d, float* ds, int64_t lane_stride);
  // Scratch bytes prepare_extra writes for a decode batch (0: none).
  size_t (*extra_bytes)(int64_t n_tokens, int64_t n_in);
  // After quantize_x filled x's qs / d / ds: fills `extra` for weights of `dtype` (may be null).
  void (*prepare_extra)(DType dtype, const DecodeX& x, void* extra);
  // y[t * ldy + o] = W[o] . x[t] for o in [o_begin, o_end) and every token of x.
  void (*decode_rows)(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                      int64_t ldy);
  // dst [n_rows, n_in] f32 = W[o_begin .. o_begin + n_rows) dequantized.
  void (*dequantize_rows)(const WeightView& w, int64_t o_begin, int64_t n_rows, float* dst);
};

const MatmulKernels& matmul_kernels(Isa isa);
const MatmulKernels& matmul_kernels_scalar();
const MatmulKernels& matmul_kernels_avx2();
const MatmulKernels& matmul_kernels_avx512();

// k-quant weight rows against Q8_K x, same contract as MatmulKernels::decode_rows
// (kernels/matmul_kquant_avx2.cpp, matmul_kquant_avx512.cpp).
void decode_rows_kquant_avx2(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                             int64_t ldy);
void decode_rows_kquant_avx512(const WeightView& w, const DecodeX& x, int64_t o_begin, int64_t o_end, float* y,
                               int64_t ldy);

// dst [n_rows, n_in] = k-quant rows dequantized, bit-identical to dequantize_row
// (matmul_kquant_avx2.cpp; AVX-512 CPUs run it too).
void dequantize_rows_kquant_avx2(const WeightView& w, int64_t o_begin, int64_t n_rows, float* dst);

// Shared by the tables (defined in matmul_avx2.cpp; AVX-512 CPUs run it too).
void dequantize_rows_avx2(const WeightView& w, int64_t o_begin, int64_t n_rows, float* dst);

}  // namespace pagoda::kernels::detail
