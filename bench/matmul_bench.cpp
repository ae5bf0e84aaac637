// Matmul throughput: decode (GB/s of weights read) and prefill (GFLOP/s) per weight dtype.
//
//   matmul_bench --benchmark_min_time=0.2
//
// Decode cycles through enough copies of the matrix to exceed the last-level cache (`cold`),
// so it measures what a model does: stream weights from DRAM. `hot` reuses one copy (from
// L3 where it fits): the kernels' compute ceiling. ReadBandwidth is the machine's roofline
// for decode: the same threads summing a large buffer.
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <cstring>
#include <iterator>
#include <vector>

#include "core/buffer.h"
#include "core/check.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace pagoda::kernels {
namespace {

constexpr int kThreads = 2;
constexpr int64_t kNIn = 2048;   // a 1B-class model's FFN up/gate: [5632, 2048]
constexpr int64_t kNOut = 5632;
constexpr size_t kColdBytes = size_t{192} << 20;  // well past a 32 MB L3

constexpr DType kDTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                             DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr int kNumDTypes = static_cast<int>(std::size(kDTypes));

// `copies` identical weight matrices [kNOut, kNIn] in separate memory.
struct WeightSet {
  std::vector<AlignedBuffer> buffers;
  std::vector<WeightView> views;
};

WeightSet make_weights(DType dtype, int copies) {
  Rng rng(7);
  const size_t row_bytes = dtype_row_bytes(dtype, kNIn);
  WeightSet set;
  std::vector<float> row(kNIn);
  for (int c = 0; c < copies; ++c) {
    auto buffer = AlignedBuffer::allocate(row_bytes * kNOut);
    CHECK(buffer.is_ok());
    set.buffers.push_back(std::move(buffer).value());
    uint8_t* data = set.buffers.back().data();
    if (c == 0) {
      for (int64_t o = 0; o < kNOut; ++o) {
        for (auto& v : row) v = rng.uniform(-1.0f, 1.0f);
        quantize_row(dtype, row.data(), data + o * row_bytes, kNIn);
      }
    } else {
      std::memcpy(data, set.buffers[0].data(), row_bytes * kNOut);
    }
    set.views.push_back(WeightView{data, dtype, kNOut, kNIn});
  }
  return set;
}

std::vector<float> make_x(int64_t n_tokens) {
  Rng rng(8);
  std::vector<float> x(static_cast<size_t>(n_tokens * kNIn));
  for (auto& v : x) v = rng.uniform(-1.0f, 1.0f);
  return x;
}

const char* path_label(Matmul::Path path) {
  switch (path) {
    case Matmul::Path::kBf16:
      return " bf16 GEMM";
    case Matmul::Path::kF32:
      return " f32 GEMM";
    case Matmul::Path::kInt8:
      return " int8 GEMM";
    default:
      return "";
  }
}

// Args: dtype index, n_tokens, cold (1) or hot (0), threads, isa (-1: detect_isa()),
// batched path (0: the default, the f32 GEMM from 16 tokens; 1: Matmul::set_batched_bf16,
// --batched-bf16; 2: the f32 decode kernels, set_f32_gemm(false)).
void BM_Decode(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int64_t n_tokens = state.range(1);
  const bool cold = state.range(2) != 0;
  const int threads = static_cast<int>(state.range(3));
  const Isa isa = state.range(4) < 0 ? detect_isa() : static_cast<Isa>(state.range(4));
  if (isa > detect_isa()) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  const size_t matrix_bytes = dtype_row_bytes(dtype, kNIn) * kNOut;
  const int copies = cold ? static_cast<int>((kColdBytes + matrix_bytes - 1) / matrix_bytes) : 1;
  WeightSet weights = make_weights(dtype, copies);
  auto x = make_x(n_tokens);
  std::vector<float> y(static_cast<size_t>(n_tokens * kNOut));
  ThreadPool pool(threads);
  Matmul matmul(pool, n_tokens, kNIn, kNOut, isa);
  matmul.set_batched_bf16(state.range(5) == 1);
  matmul.set_f32_gemm(state.range(5) != 2);
  size_t next = 0;
  for (auto _ : state) {
    matmul.run(weights.views[next], x.data(), n_tokens, y.data());
    next = (next + 1) % weights.views.size();
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(dtype_name(dtype)) + (cold ? " cold" : " hot") + " " + isa_name(matmul.isa()) +
                 path_label(matmul.path(weights.views[0], n_tokens)));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(matrix_bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n_tokens * kNIn * kNOut * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// Args: dtype index, n_tokens, isa (-1: detect_isa()), int8 GEMM on (1) or off (0: the A/B of
// the int8 GEMM against dequantize + sgemm or the decode kernels).
void BM_Prefill(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int64_t n_tokens = state.range(1);
  const Isa isa = state.range(2) < 0 ? detect_isa() : static_cast<Isa>(state.range(2));
  if (isa > detect_isa()) {
    state.SkipWithError("this CPU lacks the ISA");
    return;
  }
  WeightSet weights = make_weights(dtype, 1);
  auto x = make_x(n_tokens);
  std::vector<float> y(static_cast<size_t>(n_tokens * kNOut));
  ThreadPool pool(kThreads);
  Matmul matmul(pool, n_tokens, kNIn, kNOut, isa);
  matmul.set_int8_gemm(state.range(3) != 0);
  for (auto _ : state) {
    matmul.run(weights.views[0], x.data(), n_tokens, y.data());
    benchmark::ClobberMemory();
  }
  const char* paths[] = {"decode", "sgemm", "amx", "int8", "bf16", "f32-gemm"};
  state.SetLabel(std::string(dtype_name(dtype)) + " " + isa_name(matmul.isa()) + " " +
                 paths[static_cast<int>(matmul.path(weights.views[0], n_tokens))]);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n_tokens * kNIn * kNOut * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// The decode roofline: kThreads threads summing a kColdBytes buffer with 16-byte loads, each
// reading 4 sequential streams at once (as the decode kernels do: one stream per core pulls
// less bandwidth).
void BM_ReadBandwidth(benchmark::State& state) {
  auto buffer = AlignedBuffer::allocate(kColdBytes);
  CHECK(buffer.is_ok());
  std::memset(buffer->data(), 1, kColdBytes);
  const auto* lines = reinterpret_cast<const __m128i*>(buffer->data());
  const int64_t n = static_cast<int64_t>(kColdBytes / sizeof(__m128i));
  ThreadPool pool(kThreads);
  std::vector<int64_t> sums(kThreads * 8);
  for (auto _ : state) {
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int t) {
      const int64_t quarter = (end - begin) / 4;
      __m128i s[4] = {};
      for (int64_t i = 0; i < quarter; i += 4)
        for (int k = 0; k < 4; ++k) {
          const __m128i* p = lines + begin + k * quarter + i;
          s[k] = _mm_add_epi64(s[k], _mm_add_epi64(_mm_add_epi64(p[0], p[1]), _mm_add_epi64(p[2], p[3])));
        }
      const __m128i total = _mm_add_epi64(_mm_add_epi64(s[0], s[1]), _mm_add_epi64(s[2], s[3]));
      sums[t * 8] = _mm_cvtsi128_si64(total);
    }, 4096);
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(kColdBytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "tokens", "cold", "threads", "isa", "path"});
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 1, 1, kThreads, -1, 0});  // the number that matters
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 1, 1, 1, -1, 0});
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 1, 0, 1, -1, 0});
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 1, 1, kThreads, static_cast<int>(Isa::kAvx2), 0});
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 4, 1, kThreads, -1, 0});
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 7, 1, kThreads, -1, 0});
  for (int d = 5; d < kNumDTypes; ++d) b->Args({d, 1, 0, 1, static_cast<int>(Isa::kScalar), 0});  // k-quant references
  // Batched decode steps of f16 / bf16 weights from DRAM: the f32 GEMM, the bf16 GEMM of
  // --batched-bf16 (which holds f16 weights as bf16: the bf16 rows are its case) and the f32
  // decode kernels.
  for (int d : {1, 2})
    for (int t : {8, 12, 16, 32, 48})
      for (int path : {0, 1, 2}) b->Args({d, t, 1, kThreads, -1, path});
  for (int d : {1, 2})
    for (int path : {0, 1, 2}) b->Args({d, 16, 0, kThreads, -1, path});  // their compute ceiling
  b->UseRealTime();
}

void prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "tokens", "isa", "int8"});
  for (int d = 0; d < kNumDTypes; ++d) b->Args({d, 512, -1, 1});
  b->Args({4, 64, -1, 1});
  // Quantized weights on AVX2: the int8 GEMM against dequantize + sgemm (512 tokens) and
  // against the decode kernels (batched steps of 16 / 32 / 48 tokens).
  for (int d = 3; d < kNumDTypes; ++d)
    for (int t : {16, 32, 48, 512})
      for (int int8 : {1, 0}) b->Args({d, t, static_cast<int>(Isa::kAvx2), int8});
  // Continuous-batching decode steps: up to Matmul::kDecodeMaxTokens rows stay on the decode
  // kernels (non-F32 weights); one past it takes the sgemm path.
  for (int d : {1, 3, 5})
    for (int t : {1, 7, 16, 32, 48, 49}) b->Args({d, t, -1, 1});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_ReadBandwidth)->UseRealTime();
BENCHMARK(BM_Decode)->Apply(decode_args);
BENCHMARK(BM_Prefill)->Apply(prefill_args);

}  // namespace
}  // namespace pagoda::kernels

BENCHMARK_MAIN();
