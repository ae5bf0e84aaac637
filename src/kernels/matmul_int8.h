// Internal to the kernels: the int8 GEMM for quantized weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K),
// Matmul::Path::kInt8: prefill and batched decode steps of Matmul::int8_min_tokens or more
// tokens on Isa::kAvx512 (VNNI `vpdpbusd`, matmul_int8_avx512.cpp) when the CPU has no usable
// AMX, and on Isa::kAvx2 (`vpmaddubsw` / `vpmaddwd`, matmul_int8_avx2.cpp). Nothing is
// dequantized to f32: x is quantized exactly as the decode path quantizes it (Q8_0 blocks for
// Q8_0/Q4_0 weights, Q8_K super-blocks for the k-quants) and dotted in integers against the
// weights' own quants, so every output is matmul_decode_reference's arithmetic (integer block
// dots, the same scale products) up to the order of the float sums:
// tests/kernels/matmul_test.cpp (Int8PrefillMatchesDecodeReference) holds it to 1e-5 of
// sum |w||x| on every ISA, and DecodeReferenceApproximatesExactProduct bounds that reference
// against the exact product (x's 8-bit rounding, within 1e-2 of the same sum).
//
// The dot product puts tokens in the int32 lanes of a register (16 on AVX-512, 8 on AVX2):
// for 4 consecutive inputs k..k+3, lane l accumulates sum_k u[t_l, k] * c[o, k], with the 4
// weight codes of row o broadcast (signed bytes) and the tokens' quants as unsigned bytes
// u = q + 128. The +128 is taken out exactly by starting each block's sum at
// bias = -128 * sum_k c (per weight row), so no horizontal sums are needed and every integer
// result equals the reference's.
// AVX2 has no vpdpbusd: vpmaddubsw sums pairs of u * c into saturating int16 lanes, exact while
// |u0 c0 + u1 c1| <= 2 * 255 * max|c| stays below 2^15: so for Q4_0 (|c| <= 8), Q4_K (<= 15),
// Q5_K (<= 31) and Q6_K (<= 32) the int16 pair sums of 8, 4, 2 and 2 steps are added in int16
// before vpmaddwd widens them (by the sub-block scale for the k-quants: no vpmulld). Q8_0's
// codes (|c| <= 128) would overflow: there the panel holds q itself (Int8XForm::signed_quants,
// |q| <= 127) and each step multiplies |c| by sign(c) * q (vpsignb, as ggml does), bias unused.
//
// x panel (Int8X), tokens in groups of kPanelLanes, padded with zero tokens (quant 0, d = 0)
// to a multiple of kPanelLanes:
//   u  [groups, n_in / 4, kPanelLanes, 4] u8    the token panel (kernels/matmul_panel.h): q + 128 of
//                                          token kPanelLanes*g + lane, inputs 4*k4 .. 4*k4 + 3
//                                          (q itself where Int8XForm::signed_quants)
//   d  [groups, n_in / B, kPanelLanes]    f32   Q8_0: block scale (B = 32); Q8_K: super-block scale (B = 256)
//   xs [groups, n_in / 256, 4, kPanelLanes] i32 Q4_K/Q5_K: sub-block sums of the quants, pairs
//      (j = 2p low 16 bits, 2p + 1 high), for the mins term (vpdpwssd)
// Weight rows (Int8W), unpacked per chunk of at most kInt8RowChunk rows (padded to 4 with
// zero rows):
//   c     [rows, n_in] s8        Q8_0 qs; Q4_0 q - 8; Q4_K/Q5_K q (0..15 / 0..31); Q6_K q - 32
//   Q8_0/Q4_0 per block b:       scale [rows, n_in / 32] f32 = d; bias [rows, n_in / 32] i32
//   k-quants per super-block s:  d, dmin [rows, n_in / 256] f32; sc [rows, n_in / 256, 16] i32
//                                (8 used by Q4_K/Q5_K); mins [rows, n_in / 256, 4] i32 (i16
//                                pairs m_2p, m_2p+1); bias [rows, n_in / 256] i32
//                                = -128 * sum_j sc_j * sum_{k in j} c_k
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/matmul.h"
#include "kernels/matmul_panel.h"

namespace pagoda::kernels::detail {

inline constexpr int64_t kInt8RowChunk = 32;  // weight rows unpacked per step (a multiple of 4)

// The dtypes the int8 GEMM takes.
inline bool int8_gemm_dtype(DType dtype) {
  return dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_K || dtype == DType::kQ5_K ||
         dtype == DType::kQ6_K;
}

// The x panel, sized once for max_tokens x max_in.
struct Int8X {
  std::vector<uint8_t> u;   // 64-byte aligned view via u_data()
  std::vector<float> d;
  std::vector<float> ds;    // Q8_0 quantizer's d * sum (written, unused by the GEMM)
  std::vector<int32_t> xs;
  void resize(int64_t max_tokens, int64_t max_in);
  uint8_t* u_data() { return u.data() + (64 - reinterpret_cast<uintptr_t>(u.data()) % 64) % 64; }
};

// One thread's unpacked weight rows, sized for kInt8RowChunk x max_in; plus the thread's
// x-quantization scratch.
struct Int8W {
  std::vector<int8_t> c;
  std::vector<float> scale, d, dmin;
  std::vector<int32_t> bias, sc, mins;
  std::vector<int8_t> x_qs;       // [max_in] one token's Q8_0 quants
  std::vector<BlockQ8_K> x_q8k;   // [max_in / 256] one token's Q8_K blocks
  void resize(int64_t max_in);
};

// What a Matmul holds for the int8 path: the x panel and one Int8W per pool thread.
struct Int8Scratch {
  Int8X x;
  std::vector<Int8W> w;
};

// quantize_row_q8_k (kernels/kquant.h) in AVX-512, bit-identical to it for finite x.
void int8_quantize_q8k(const float* x, BlockQ8_K* y, int64_t n);

// How an ISA's kernels take x: its quantizers, bit-identical to quantize_row(kQ8_0) and
// quantize_row_q8_k, and whether the panel holds q (AVX2, Q8_0 weights) or q + 128.
struct Int8XForm {
  void (*quantize_x)(const float* x, int64_t n, int8_t* qs, float* d, float* ds, int64_t lane_stride);
  void (*quantize_q8k)(const float* x, BlockQ8_K* y, int64_t n);
  bool signed_quants = false;
};

// Quantizes tokens [t_begin, t_end) of x [n_tokens, n_in] into the panel (for weights of
// `dtype`), using `w`'s x scratch.
void int8_prepare_x(DType dtype, const float* x, int64_t t_begin, int64_t t_end, int64_t n_in, const Int8XForm& form,
                    Int8X& panel, Int8W& w);
// Zero tokens [n_tokens, panel_pad_tokens(n_tokens)) of the panel.
void int8_pad_x(DType dtype, int64_t n_tokens, int64_t n_in, const Int8XForm& form, Int8X& panel);

// Rows [o_begin, o_begin + rows) of the weights into w (rows <= kInt8RowChunk), then zero
// rows up to a multiple of 4.
void int8_unpack_rows(const WeightView& wv, int64_t o_begin, int64_t rows, Int8W& w);

// y[t * ldy + o] for t < n_tokens, o in [o_begin, o_end) (o_end - o_begin <= kInt8RowChunk):
// unpacks those rows into `w` and runs the ISA's kernel over every token tile. The panel was
// prepared with that ISA's Int8XForm.
void int8_gemm_rows_avx512(const WeightView& wv, int64_t o_begin, int64_t o_end, Int8X& panel, int64_t n_tokens,
                           Int8W& w, float* y, int64_t ldy);
void int8_gemm_rows_avx2(const WeightView& wv, int64_t o_begin, int64_t o_end, Int8X& panel, int64_t n_tokens,
                         Int8W& w, float* y, int64_t ldy);

}  // namespace pagoda::kernels::detail
