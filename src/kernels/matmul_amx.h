// Internal to the kernels: prefill GEMM on AMX tiles (TDPBF16PS) for non-F32 weights,
// used by Matmul::run_prefill when the CPU has AMX-BF16 and the kernel grants tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, requested once per process by amx_usable()).
//
// Accuracy (split bf16): x = x_hi + x_lo with x_hi = bf16(x), x_lo = bf16(x - x_hi), so
// |x - x_hi - x_lo| <= 2^-17 |x|; F16 weights split the same way exactly (an f16 has 11
// significant bits: 8 in w_hi, the rest in w_lo), BF16 weights have w_lo = 0; dequantized
// quantized weights (up to 19 significant bits) split like x, within 2^-17. The products
// w_hi x_hi + w_hi x_lo + w_lo x_hi (w_lo x_lo, at most 2^-18 |w x|, dropped) accumulate in
// f32 in the tiles, so each output is within about 2^-16 (F16/BF16) or 2^-15 (quantized)
// times sum |w| |x| of the exact product, plus f32 accumulation
// (tests/kernels/matmul_test.cpp: PrefillMatchesReference holds every dtype to 1e-5 of that sum).
//
// Layouts (uint16 = bf16 bits):
//   x split:   hi, lo [m_pad, n_in], m_pad = m rounded up to 32, padding rows zero
//   w packed:  hi, lo [n_tiles = rows_pad / 16][n_in / 32][16 pairs][16 rows][2]: one 1 KB
//              AMX B tile per (16 rows, 32 inputs); rows_pad = rows rounded up to 32
#pragma once

#include <cstdint>

namespace pagoda::kernels::detail {

inline constexpr int64_t kAmxRowChunk = 64;  // weight rows packed per step (a multiple of 32)

// The CPU has AMX-TILE and AMX-BF16 (and AVX512-BF16), and the process may use tile data.
bool amx_usable();

inline int64_t amx_pad32(int64_t n) { return (n + 31) / 32 * 32; }

// Rows [0, rows) of x [rows, n_in] split into hi/lo (rows of the destination beyond `rows` are
// not touched). n_in % 32 == 0.
void amx_split_x(const float* x, int64_t rows, int64_t n_in, uint16_t* hi, uint16_t* lo);
// Zeroes rows [rows, amx_pad32(rows)) of hi and lo.
void amx_zero_pad_x(int64_t rows, int64_t n_in, uint16_t* hi, uint16_t* lo);

// w: [rows, n_in] f32 (rows <= kAmxRowChunk); writes the packed tiles of rows_pad rows.
void amx_pack_w(const float* w, int64_t rows, int64_t n_in, bool with_lo, uint16_t* hi, uint16_t* lo);

// y[t * ldy + r] = sum_i w[r, i] * x[t, i] for t < m, r < rows, from the split x (m_pad rows)
// and the packed w. ctmp: [32, 32] f32 scratch, 64-byte aligned. Configures the tiles of the
// calling thread.
void amx_gemm(const uint16_t* x_hi, const uint16_t* x_lo, int64_t m, int64_t n_in, const uint16_t* w_hi,
              const uint16_t* w_lo, bool with_lo, int64_t rows, float* y, int64_t ldy, float* ctmp);

}  // namespace pagoda::kernels::detail
