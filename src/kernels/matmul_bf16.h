// Internal to the kernels: the bf16 prefill GEMM (AVX-512 BF16 `vdpbf16ps`) for F16 and BF16
// weights, Matmul::Path::kBf16: prefill (more than Matmul::kDecodeMaxTokens tokens) on
// Isa::kAvx512 CPUs that have AVX512-BF16 but no usable AMX; batched decode steps stay f32
// unless Matmul::set_batched_bf16 (then from Matmul::kBf16MinTokens tokens on).
// `vdpbf16ps` does 2 multiply-adds per f32 lane, twice the rate of f32 FMA
// (peak_flops_bench on this CPU: 457 against 232 GFLOP/s on 2 cores).
//
// Arithmetic: y[t, o] = sum_i bf16(W[o, i]) * bf16(x[t, i]): both rounded to bf16 (to nearest
// even; BF16 weights are exact, F16 weights lose their 3 low significand bits), each product
// exact in f32, the sums in f32 (inputs and results below 2^-126 flushed to zero, as the
// instruction does). matmul_bf16_reference (kernels/matmul.h) is that sum in double.
// Accuracy against the float64 product of the unrounded values: a bf16 rounding is within
// 2^-8 of its value, so each product is within 2^-7 and |y - exact| <= 2^-7 sum |w||x| plus
// the f32 sums (tests/kernels/matmul_test.cpp: Bf16PrefillMatchesBf16Reference holds the
// kernel to 1e-5 of sum |w||x| of the reference, Bf16ReferenceApproximatesExactProduct the
// reference to 1e-2 of it against the exact product).
//
// Layouts (uint16 = bf16 bits):
//   x panel  [groups, n_in / 2, kPanelLanes, 2]  the token panel (kernels/matmul_panel.h):
//            values 2*k2, 2*k2 + 1 of token kPanelLanes*g + lane, padding tokens zero
//   w rows   [rows, n_in] row-major, one chunk of at most kBf16RowChunk rows per step: F16
//            converted into scratch, zero rows up to a multiple of 8; BF16 rows read in place
//            (a last partial tile of 8 copied and zero-padded)
// A tile is 8 weight rows x 1 or 2 registers of 16 tokens: per pair of inputs, the tokens'
// pairs are loaded once and each row's pair is broadcast into 2 `vdpbf16ps`.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_panel.h"

namespace pagoda::kernels::detail {

inline constexpr int64_t kBf16RowChunk = 32;  // a multiple of 8

// The CPU has AVX512-BF16 (CPUID.(7,1):EAX bit 5).
bool bf16_usable();

struct Bf16Scratch {
  std::vector<uint16_t> x;               // the panel (+32 to align to 64 bytes)
  std::vector<std::vector<uint16_t>> w;  // per pool thread: [kBf16RowChunk, max_in]
  uint16_t* x_data() { return x.data() + (64 - reinterpret_cast<uintptr_t>(x.data()) % 64) % 64 / 2; }
};

// Tokens [t_begin, t_end) of x [n_tokens, n_in] into the panel, each converted in `row`
// ([n_in] scratch: the calling thread's w rows, which the GEMM pass overwrites later);
// bf16_pad_x zeroes the padding tokens after n_tokens.
void bf16_prepare_x(const float* x, int64_t t_begin, int64_t t_end, int64_t n_in, uint16_t* row, uint16_t* panel);
void bf16_pad_x(int64_t n_tokens, int64_t n_in, uint16_t* panel);

// y[t * ldy + o] for t < n_tokens, o in [o_begin, o_end) (at most kBf16RowChunk rows), the
// rows converted into w_rows ([kBf16RowChunk, n_in]).
void bf16_gemm_rows(const WeightView& w, int64_t o_begin, int64_t o_end, const uint16_t* panel, int64_t n_tokens,
                    uint16_t* w_rows, float* y, int64_t ldy);

}  // namespace pagoda::kernels::detail
