// Internal to the kernels: the f32 GEMM of batched decode steps (Matmul::Path::kF32) for F16
// and BF16 weights on Isa::kAvx2 and up (matmul_f32_avx2.cpp, matmul_f32_avx512.cpp), from Matmul::kF32MinTokens to Matmul::kDecodeMaxTokens
// tokens: 16 tokens to a register (the int8 / bf16 GEMMs' shape), where the decode kernels
// put 16 inputs to a register and reduce across it.
//
// Arithmetic: y[t, o] = sum_i W[o, i] * x[t, i] with W converted exactly to f32 and one f32
// accumulator per (o, t) running over i in order, one FMA per product: matmul_decode_reference's
// sum, fused (its tests hold it to 1e-5 of sum |w||x|, as the decode kernels). Each token's
// result depends on its own x row only, not on which or how many other tokens share the call
// (its lane of the accumulators sees nothing else): BatchedF32DecodeIsBatchInvariant tests it.
//
// Layouts:
//   x panel  [groups, n_in, kPanelLanes] f32   (kernels/matmul_panel.h with 4-byte units: one
//            f32 of each of 16 tokens per input; padding tokens zero)
//   w chunk  [kF32KChunk / 16, kR, 16] f32    per pool thread: a tile's kR rows, inputs
//            [k0, k0 + kF32KChunk) converted, 16 inputs of each row in turn (rows past the
//            matrix zero), so a product's weight is one broadcast load at a fixed offset
// A tile is kR weight rows x 1..3 registers of 16 tokens (AVX-512: kR = 16 for one register, 8
// for more, at most 24 accumulators; AVX2: two 8-float halves per register, kR = 6 / 3 / 2, at
// most 12); per input it loads each token register once and broadcast-loads each row's weight
// into one FMA per register. Both ISAs compute the same sums in the same order: the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_panel.h"

namespace pagoda::kernels::detail {

inline constexpr int64_t kF32RowChunk = 64;   // rows per f32_gemm_rows call, a multiple of 16
// Inputs converted at a time: 16 KB of f32 at 16 rows, beside the x panel's 16 KB in L1
// (2,048 x 5,632 f16 at 16 tokens on 2 threads, 2026-12-06: 1.01-1.03 ms at 256 against
// 1.12-1.16 ms at 128 and 1.07-1.09 ms at 512; 32 and 48 tokens alike).
inline constexpr int64_t kF32KChunk = 256;
inline constexpr int64_t kF32ChunkFloats = kF32KChunk * 16;  // a w chunk, at most 16 rows
// Floats left unused before and after each thread's w chunk: threads' chunks next to each
// other in memory slowed the GEMM on 2 threads (2,048 x 5,632 f16, 16 tokens: 1.2-1.9 ms against
// 1.04-1.08 with the chunks apart, 2026-12-06; why was not pinned down: one buffer or page
// pair per core is the layout that measured fast).
inline constexpr int64_t kF32ChunkGuard = 1024;

struct F32Scratch {
  std::vector<float> x;               // the panel (+16 to align to 64 bytes)
  std::vector<std::vector<float>> w;  // per pool thread: the w chunk (+16 to align, + the guards)
  static float* aligned(std::vector<float>& v) {
    return v.data() + (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64 / 4;
  }
  float* x_data() { return aligned(x); }
};

// Weights this GEMM takes: F16 or BF16, n_in a multiple of 16.
inline bool f32_gemm_weights(const WeightView& w) {
  return (w.dtype == DType::kF16 || w.dtype == DType::kBF16) && w.n_in % 16 == 0;
}

// Tokens [t_begin, t_end) of x [n_tokens, n_in] into the panel; f32_pad_x zeroes the padding
// tokens after n_tokens (matmul_f32_avx2.cpp: run on Isa::kAvx2 and up).
void f32_prepare_x(const float* x, int64_t t_begin, int64_t t_end, int64_t n_in, float* panel);
void f32_pad_x(int64_t n_tokens, int64_t n_in, float* panel);

// y[t * ldy + o] for t < n_tokens (<= 3 * kPanelLanes), o in [o_begin, o_end) (at most
// kF32RowChunk rows); w_chunk: the calling thread's kF32ChunkFloats floats, 64-byte aligned.
void f32_gemm_rows(const WeightView& w, int64_t o_begin, int64_t o_end, const float* panel, int64_t n_tokens,
                   float* w_chunk, float* y, int64_t ldy);
void f32_gemm_rows_avx2(const WeightView& w, int64_t o_begin, int64_t o_end, const float* panel, int64_t n_tokens,
                        float* w_chunk, float* y, int64_t ldy);

}  // namespace pagoda::kernels::detail
