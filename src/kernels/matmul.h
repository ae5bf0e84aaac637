// Matrix multiplication against a weight matrix, the op that dominates inference time.
//
//   y[t, o] = sum_i W[o, i] * x[t, i]
//   W: [n_out, n_in] row-major in its storage dtype (a GGUF tensor with ne0 = n_in)
//   x: [n_tokens, n_in] f32, row stride n_in
//   y: [n_tokens, n_out] f32, row stride n_out
//
// Paths (chosen by `Matmul`):
//   - decode (n_tokens < kBlasMinTokens): SIMD dot products, output rows split over the pool.
//     Each weight block is read once for all tokens of the call (so 2..7 tokens cost little
//     more memory traffic than 1). For Q8_0/Q4_0 weights x is first quantized to Q8_0 and
//     dotted in integers (as ggml does); for k-quant weights (Q4_K/Q5_K/Q6_K) x is quantized
//     to Q8_K (256-value blocks) and dotted per super-block. Memory-bandwidth bound on one token.
//   - prefill (n_tokens >= kBlasMinTokens): each thread dequantizes a chunk of weight rows to
//     f32 and calls single-threaded OpenBLAS sgemm on it (F32 weights go to sgemm directly).
// Decode is compared against `matmul_decode_reference` (to float rounding), prefill against
// `matmul_reference`, on every ISA, in tests/kernels/matmul_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kquant.h"

namespace pagoda::kernels {

struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t n_out = 0;
  int64_t n_in = 0;  // a multiple of the dtype's block size
  size_t row_bytes() const { return dtype_row_bytes(dtype, n_in); }
  const uint8_t* row(int64_t o) const { return static_cast<const uint8_t*>(data) + o * row_bytes(); }
};

// Plain scalar reference: dequantizes each row and accumulates in double, x unquantized.
void matmul_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y);

// Scalar reference of the decode path's arithmetic (for Q8_0/Q4_0: x quantized to Q8_0,
// integer block dots times the two scales, summed in float; for k-quants: x quantized to
// Q8_K and dotted as kernels/kquant.h's dot_kquant_q8k). Fast kernels must match it
// to float rounding; for F32/F16/BF16 it equals a float dot product.
void matmul_decode_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y);

enum class Isa { kScalar, kAvx2, kAvx512 };
Isa detect_isa();                 // best ISA this CPU runs
const char* isa_name(Isa isa);

// Owns the scratch the fast paths need, sized once for the largest matrix and batch, so the
// step loop never allocates. Not thread-safe: one Matmul per model runner.
// The constructor calls openblas_set_num_threads(1) (process-wide): parallelism comes from
// the pool, each thread running its own single-threaded sgemm.
class Matmul {
 public:
  // max_tokens: the most tokens in one call; max_in / max_out: the largest weight matrix.
  // `isa` must be one this CPU runs (isa <= detect_isa(), CHECKed).
  Matmul(ThreadPool& pool, int64_t max_tokens, int64_t max_in, int64_t max_out, Isa isa = detect_isa());
  // Preconditions: 1 <= n_tokens <= max_tokens, w.n_in <= max_in, w.n_out <= max_out;
  // x and y do not overlap.
  void run(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  Isa isa() const { return isa_; }
  static constexpr int64_t kBlasMinTokens = 8;  // fewer tokens: decode path
  // Weight rows dequantized per sgemm call: 128 x max_in f32 per thread (64..256 measured
  // alike on Zen 4 at 512 tokens).
  static constexpr int64_t kBlasRowChunk = 128;
  static constexpr int64_t kDecodeRowGrain = 16;  // rows per thread unit (64-byte y lines)

 private:
  void run_decode(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  void run_prefill(const WeightView& w, const float* x, int64_t n_tokens, float* y);

  ThreadPool& pool_;
  Isa isa_;
  int64_t max_tokens_, max_in_, max_out_;
  // x quantized to Q8_0 for the integer decode kernels (layout: kernels/matmul_isa.h).
  std::vector<int8_t> x_qs_;                   // [min(max_tokens, kBlasMinTokens - 1), max_in] quants
  std::vector<float> x_d_;                     // [max_in / 32, kBlasMinTokens] block scales
  std::vector<float> x_ds_;                    // [max_in / 32, kBlasMinTokens] scale * sum(quants)
  std::vector<uint8_t> x_extra_;               // ISA-specific, kernels' extra_bytes() (+ 64 to align)
  std::vector<BlockQ8_K> x_q8k_;               // [decode tokens, max_in / 256], for k-quant weights
  std::vector<std::vector<float>> w_scratch_;  // per thread: [kBlasRowChunk, max_in] f32
};

}  // namespace pagoda::kernels
