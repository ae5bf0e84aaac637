// Matrix multiplication against a weight matrix, the op that dominates inference time.
//
//   y[t, o] = sum_i W[o, i] * x[t, i]
//   W: [n_out, n_in] row-major in its storage dtype (a GGUF tensor with ne0 = n_in)
//   x: [n_tokens, n_in] f32, row stride n_in
//   y: [n_tokens, n_out] f32, row stride n_out
//
// Paths (chosen by `Matmul`, see uses_decode_kernels):
//   - decode (n_tokens < kBlasMinTokens; for non-F32 weights up to kDecodeMaxTokens, which is
//     what a continuous-batching step of many sequences' decodes looks like): SIMD dot
//     products, output rows split over the pool. Tokens go in groups of up to
//     kDecodeGroupTokens; with several groups each thread walks its rows in tiles small enough
//     to stay in L2 and runs every group over a tile before moving on, so the weights still
//     stream from memory once per call and nothing is dequantized to f32 (the sgemm path would
//     dequantize the whole matrix on every call, which dominates a 16-row step).
//     Each weight block is read once for all tokens of the call (so 2..7 tokens cost little
//     more memory traffic than 1). For Q8_0/Q4_0 weights x is first quantized to Q8_0 and
//     dotted in integers (as ggml does); for k-quant weights (Q4_K/Q5_K/Q6_K) x is quantized
//     to Q8_K (256-value blocks) and dotted per super-block. Memory-bandwidth bound on one token.
//     From int8_min_tokens tokens on, quantized weights go to the int8 GEMM below instead
//     where it runs (uses_int8): the same arithmetic, 16 (AVX-512) or 8 (AVX2) tokens to a register. F16/BF16
//     weights from kF32MinTokens tokens on run the f32 GEMM (kernels/matmul_f32.h) on
//     Isa::kAvx2 and up: the decode arithmetic, 16 tokens to a register, each token's result
//     independent of the others in the call. With set_batched_bf16(true) calls of
//     kBf16MinTokens or more tokens run the bf16 GEMM below instead (faster again, but a
//     decoding sequence's numbers then depend on how many others share its step, at bf16's
//     2^-8 instead of f32 rounding; an opt-in of the deployment, EngineConfig::batched_bf16).
//   - prefill (n_tokens >= kBlasMinTokens): each thread dequantizes a chunk of weight rows to
//     f32 and calls single-threaded OpenBLAS sgemm on it (F32 weights go to sgemm directly).
//     Non-F32 weights (n_in % 32 == 0) on a CPU with AMX-BF16 (Isa::kAvx512 only) run on AMX
//     tiles instead: the dequantized chunk and x split into bf16 hi + lo parts
//     (kernels/matmul_amx.h: within about 2^-16 of sum |w||x| for F16/BF16 weights, 2^-15
//     for quantized ones, inside the sgemm path's test tolerance of 1e-5).
//     Quantized weights (Q8_0/Q4_0/Q4_K/Q5_K/Q6_K) on Isa::kAvx2 and Isa::kAvx512 without AMX
//     skip the f32 dequantization: x is quantized as for decode and multiplied by the weights'
//     own quants in the int8 GEMM (VNNI on AVX-512, vpmaddubsw on AVX2; kernels/matmul_int8.h),
//     whose arithmetic is the decode path's.
//     F16/BF16 weights there, with AVX512-BF16, run the bf16 GEMM (kernels/matmul_bf16.h):
//     W and x rounded to bf16, twice the f32 FMA rate, within 2^-7 sum |w||x| of the exact
//     product (the sgemm path it replaces: 1e-5).
// Decode, the f32 GEMM and the int8 prefill are compared against `matmul_decode_reference` (to float
// rounding), the bf16 prefill against `matmul_bf16_reference`, the other prefill paths against
// `matmul_reference`, on every ISA, in tests/kernels/matmul_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kquant.h"

namespace pagoda::kernels {

namespace detail {
struct Int8Scratch;  // kernels/matmul_int8.h
struct Bf16Scratch;  // kernels/matmul_bf16.h
struct F32Scratch;   // kernels/matmul_f32.h
}

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

// The bf16 prefill path's arithmetic (kernels/matmul_bf16.h): W and x rounded to bf16 (nearest
// even), products summed in double. Within 2^-7 sum |w||x| of matmul_reference.
void matmul_bf16_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y);

// The instruction sets the kernels are built for, each a superset of the ones before it:
//   kAvx2    AVX2 + FMA + F16C (Haswell, Zen 1-3 and later)
//   kAvx512  + AVX-512 F/BW/VL/DQ/VNNI (the int8 GEMM; the bf16 GEMM where the CPU has AVX512-BF16)
//   kAmx     + AMX-BF16 tiles, allowed by the kernel (prefill of non-F32 weights on tiles)
// An engine runs the kernels of one ISA (EngineConfig::isa, `--isa`): the best the CPU has by
// default, or a lower one so that one host can test every path it can execute.
enum class Isa { kScalar, kAvx2, kAvx512, kAmx };
Isa detect_isa();                 // best ISA this CPU runs
const char* isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);  // "scalar", "avx2", "avx512", "amx"
std::vector<Isa> supported_isas();  // every ISA this CPU runs, kScalar first
// Whether Matmul::set_batched_bf16 changes anything on `isa` on this CPU: the bf16 GEMM runs on
// Isa::kAvx512 with AVX512-BF16 (with AMX, prefill runs on tiles and batched steps stay f32).
bool batched_bf16_runs(Isa isa);

// Owns the scratch the fast paths need, sized once for the largest matrix and batch, so the
// step loop never allocates. Not thread-safe: one Matmul per model runner.
// The constructor calls openblas_set_num_threads(1) (process-wide): parallelism comes from
// the pool, each thread running its own single-threaded sgemm.
class Matmul {
 public:
  // max_tokens: the most tokens in one call; max_in / max_out: the largest weight matrix.
  // `isa` must be one this CPU runs (isa <= detect_isa(), CHECKed).
  Matmul(ThreadPool& pool, int64_t max_tokens, int64_t max_in, int64_t max_out, Isa isa = detect_isa());
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  // Preconditions: 1 <= n_tokens <= max_tokens, w.n_in <= max_in, w.n_out <= max_out;
  // x and y do not overlap.
  void run(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  Isa isa() const { return isa_; }
  // Batched decode calls (kBf16MinTokens..kDecodeMaxTokens tokens) of F16/BF16 weights run the
  // bf16 GEMM where uses_bf16 (see the paths above). Off by default.
  void set_batched_bf16(bool on) { batched_bf16_ = on; }
  // Off: batched decode calls that would take the f32 GEMM stay on the decode kernels (the
  // A/B of matmul_bench). On by default.
  void set_f32_gemm(bool on) { f32_gemm_ = on; }
  // Off: calls that would take the int8 GEMM take the decode kernels or dequantize + sgemm
  // instead (the A/B of matmul_bench). On by default.
  void set_int8_gemm(bool on) { int8_gemm_ = on; }
  // The path a call of n_tokens rows against w takes (the paths above): the decode kernels,
  // dequantize + sgemm, AMX tiles, the int8 GEMM, the bf16 GEMM or the f32 GEMM.
  enum class Path { kDecode, kSgemm, kAmx, kInt8, kBf16, kF32 };
  Path path(const WeightView& w, int64_t n_tokens) const;
  // Whether prefill against these weights runs on AMX tiles (see the paths above).
  bool uses_amx(const WeightView& w) const {
    return amx_ && w.dtype != DType::kF32 && w.n_in % 32 == 0 && !(f32_precision_ && half_weights(w.dtype));
  }
  // On: F16/BF16 weights keep f32 arithmetic on every path (EngineConfig::f32_matmul,
  // `--matmul-precision f32`): no bf16 GEMM, no AMX bf16 tiles, no set_batched_bf16; they take
  // the f32 GEMM, the decode kernels or dequantize + sgemm (matmul_reference to float
  // rounding). Quantized weights keep their paths (x is quantized to 8 bits there, as llama.cpp
  // does). Off (default, `auto`): the fastest path the ISA has.
  void set_f32_precision(bool on) { f32_precision_ = on; }
  bool f32_precision() const { return f32_precision_; }
  static bool half_weights(DType dtype) { return dtype == DType::kF16 || dtype == DType::kBF16; }
  // Whether prefill against these weights runs the int8 GEMM (kernels/matmul_int8.h): quantized
  // weights on Isa::kAvx2 and Isa::kAvx512 without AMX, unless set_int8_gemm(false). Its
  // arithmetic is matmul_decode_reference's.
  bool uses_int8(const WeightView& w) const;
  // Whether prefill against these weights runs the bf16 GEMM (kernels/matmul_bf16.h): F16 and
  // BF16 weights on Isa::kAvx512 with AVX512-BF16 and without AMX. Its arithmetic is
  // matmul_bf16_reference's.
  bool uses_bf16(const WeightView& w) const;
  // Whether batched decode calls (kF32MinTokens..kDecodeMaxTokens tokens) against these weights
  // run the f32 GEMM (kernels/matmul_f32.h): F16 and BF16 weights (n_in a multiple of 16) on
  // Isa::kAvx2 and up, unless set_f32_gemm(false).
  bool uses_f32(const WeightView& w) const;
  static constexpr int64_t kBlasMinTokens = 8;  // fewer tokens: decode path
  static constexpr int64_t kDecodeGroupTokens = kBlasMinTokens - 1;  // tokens per kernel pass
  static constexpr int64_t kDecodeMaxTokens = 48;  // non-F32 weights: decode kernels up to here
  static constexpr int64_t kDecodeMaxGroups = (kDecodeMaxTokens + kDecodeGroupTokens - 1) / kDecodeGroupTokens;
  static constexpr int64_t kDecodeTileBytes = 128 << 10;  // weight bytes per tile, several groups
  // Which path n_tokens rows against weights of `dtype` take (the decode kernels' arithmetic
  // is matmul_decode_reference's; sgemm's is matmul_reference's).
  static bool uses_decode_kernels(DType dtype, int64_t n_tokens) {
    return n_tokens < kBlasMinTokens || (dtype != DType::kF32 && n_tokens <= kDecodeMaxTokens);
  }
  // Batched decode steps of at least this many tokens take the int8 GEMM where uses_int8 on
  // Isa::kAvx512 (the same arithmetic; matmul_bench, hot weights, 16 / 32 / 48 tokens: Q8_0
  // 273 / 364 / 428 GFLOP/s against the decode kernels' 271 / 285 / 251, Q4_K 295 / 404 / 474
  // against 180 / 230 / 237; at 8 tokens half of its 16-token register would be padding).
  static constexpr int64_t kInt8MinTokens = 16;
  // On Isa::kAvx2 (no VNNI) the int8 GEMM gains less per token: batched steps of k-quant
  // weights take it from this many tokens (2026-12-07, Zen 3, 2 threads, 2,048 x 5,632 hot:
  // Q4_K 4.3 / 5.6 ms at 32 / 48 tokens against the decode kernels' 4.9 / 7.2, Q6_K 3.9 / 5.7
  // against 5.0 / 8.4; at 16 tokens the decode kernels win or tie), Q8_0/Q4_0 weights only
  // past kDecodeMaxTokens (Q8_0 7.7 / 8.4 ms at 32 / 48 against 5.8 / 8.7, Q4_0 slower at all three).
  static constexpr int64_t kInt8MinTokensAvx2KQuant = 32;
  // The fewest tokens of a call against `dtype` weights that takes the int8 GEMM where uses_int8.
  int64_t int8_min_tokens(DType dtype) const {
    if (isa_ >= Isa::kAvx512) return kInt8MinTokens;
    return is_kquant(dtype) ? kInt8MinTokensAvx2KQuant : kDecodeMaxTokens + 1;
  }
  // With set_batched_bf16: batched decode calls of F16/BF16 weights from this many tokens take
  // the bf16 GEMM (matmul_bench 2026-12-06, weights from DRAM, 16 / 32 / 48 tokens: BF16 rows
  // read in place 555 / 847 / 760 GFLOP/s, F16 rows converted per chunk 321 / 557 / 583,
  // against the f32 decode kernels' 204 / 215 / 204).
  static constexpr int64_t kBf16MinTokens = 16;
  // Batched decode calls of F16/BF16 weights from this many tokens take the f32 GEMM where
  // uses_f32. Its time is flat up to 16 tokens (one register), the decode kernels' grows by
  // groups of 7 (2,048 x 5,632 f16, 2026-12-06, 2 threads: the GEMM 1.05-1.28 ms at 16 tokens,
  // the decode kernels 1.77-1.79 ms at 16 and 1.07-1.13 ms at 12, where the GEMM gains nothing).
  static constexpr int64_t kF32MinTokens = 16;
  // Weight rows dequantized per sgemm call: 128 x max_in f32 per thread (64..256 measured
  // alike on Zen 4 at 512 tokens).
  static constexpr int64_t kBlasRowChunk = 128;
  static constexpr int64_t kDecodeRowGrain = 16;  // rows per thread unit (64-byte y lines)

 private:
  void run_decode(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  void run_prefill(const WeightView& w, const float* x, int64_t n_tokens, float* y);  // sgemm
  void run_prefill_amx(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  void run_prefill_int8(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  void run_prefill_bf16(const WeightView& w, const float* x, int64_t n_tokens, float* y);
  void run_f32(const WeightView& w, const float* x, int64_t n_tokens, float* y);

  ThreadPool& pool_;
  Isa isa_;
  int64_t max_tokens_, max_in_, max_out_;
  bool batched_bf16_ = false;                  // set_batched_bf16
  bool f32_gemm_ = true;                       // set_f32_gemm
  bool int8_gemm_ = true;                      // set_int8_gemm
  bool f32_precision_ = false;                 // set_f32_precision
  // x quantized to Q8_0 for the integer decode kernels (layout: kernels/matmul_isa.h).
  // Decode tokens: min(max_tokens, kDecodeMaxTokens), in groups of kDecodeGroupTokens.
  int64_t decode_groups_ = 0;                  // ceil(decode tokens / kDecodeGroupTokens)
  size_t extra_stride_ = 0;                    // bytes of one group's extra, a multiple of 64
  std::vector<int8_t> x_qs_;                   // [decode tokens, max_in] quants
  std::vector<float> x_d_;                     // [groups, max_in / 32, kDecodeLanes] block scales
  std::vector<float> x_ds_;                    // [groups, max_in / 32, kDecodeLanes] scale * sum(quants)
  std::vector<uint8_t> x_extra_;               // [groups, extra_stride_] ISA-specific (+ 64 to align)
  std::vector<BlockQ8_K> x_q8k_;               // [decode tokens, max_in / 256], for k-quant weights
  std::vector<std::vector<float>> w_scratch_;  // per thread: [kBlasRowChunk, max_in] f32
  bool amx_ = false;                           // AMX prefill for F16/BF16 weights
  std::vector<uint16_t> x_hi_, x_lo_;          // [max_tokens rounded up to 32, max_in] bf16 split of x
  std::vector<std::vector<uint16_t>> w_packed_;  // per thread: hi, lo [2, kAmxRowChunk (64), max_in] packed tiles
  std::vector<std::vector<float>> c_scratch_;    // per thread: [32, 32] f32 (+16 to align)
  std::unique_ptr<detail::Int8Scratch> int8_;    // int8 prefill (Isa::kAvx512, no AMX), else null
  std::unique_ptr<detail::Bf16Scratch> bf16_;    // bf16 prefill (AVX512-BF16, no AMX), else null
  std::unique_ptr<detail::F32Scratch> f32_;      // f32 GEMM of batched decode (Isa::kAvx2 and up), else null
};

}  // namespace pagoda::kernels
