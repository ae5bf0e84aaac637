// Matrix multiplication against a weight matrix, the op that dominates inference time.
//
//   y[t, o] = sum_i W[o, i] * x[t, i]
//   W: [n_out, n_in] row-major in its storage dtype (a GGUF tensor with ne0 = n_in)
//   x: [n_tokens, n_in] f32, row stride n_in
//   y: [n_tokens, n_out] f32, row stride n_out
//
// Paths (chosen by `Matmul`):
//   - decode (n_tokens small): SIMD dot products per weight row, rows split over the pool.
//     For Q8_0/Q4_0 weights x is first quantized to Q8_0 and dotted in integers (as ggml does).
//   - prefill (n_tokens >= kBlasMinTokens): each thread dequantizes a chunk of weight rows to
//     f32 and calls single-threaded OpenBLAS sgemm on it (F32 weights go to sgemm directly).
// Every path is compared against `matmul_reference` in tests/kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

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
// integer block dots times the two scales, summed in float). Fast kernels must match it
// to float rounding; for F32/F16/BF16 it equals a float dot product.
void matmul_decode_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y);

enum class Isa { kScalar, kAvx2, kAvx512 };
Isa detect_isa();                 // best ISA this CPU runs
const char* isa_name(Isa isa);

// Owns the scratch the fast paths need, sized once for the largest matrix and batch, so the
// step loop never allocates. Not thread-safe: one Matmul per model runner.
class Matmul {
 public:
  // max_tokens: the most tokens in one call; max_in / max_out: the largest weight matrix.
  Matmul(ThreadPool& pool, int64_t max_tokens, int64_t max_in, int64_t max_out, Isa isa = detect_isa());
  void run(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  Isa isa() const { return isa_; }
  static constexpr int64_t kBlasMinTokens = 8;

 private:
  ThreadPool& pool_;
  Isa isa_;
  int64_t max_tokens_, max_in_, max_out_;
  std::vector<uint8_t> x_quant_;                // [max_tokens, max_in / 32] BlockQ8_0
  std::vector<std::vector<float>> w_scratch_;   // per thread: [kBlasRowChunk, max_in] f32
};

}  // namespace pagoda::kernels
