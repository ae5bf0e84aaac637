// Compute peak of this CPU, the roof for prefill and batched steps in BENCHMARKS.md: AVX2 f32
// FMA (256-bit vfmadd231ps, the roof of the AVX2 paths), AVX-512 f32 FMA (vfmadd231ps), AVX-512 BF16 dot products (vdpbf16ps, 2 multiply-adds per f32 lane),
// AVX-512 VNNI int8 dot products (vpdpbusd, 4 u8 x s8 multiply-adds per int32 lane: the roof
// of the int8 GEMM for quantized weights, counted as 2 ops per multiply-add like a FLOP)
// and AMX-BF16 tiles (tdpbf16ps, 16 x 16 x 32 multiply-adds, 4 independent accumulators),
// register/tile-only loops on each of T threads at once, best of 5 runs.
//
//   build/bin/peak_flops_bench [threads=2] [--json]
// GCC 12 AVX-512 headers trip -W(maybe-)uninitialized when their reductions are inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr long kIters = 20'000'000;
constexpr int kChains = 16;

// 12 chains: with the two constants that fills 14 of the 16 ymm registers (16 chains spill).
constexpr int kChains256 = 12;

__attribute__((target("avx2,fma"))) float fma256_loop(long iters) {
  __m256 acc[kChains256];
  for (int i = 0; i < kChains256; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains256; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float lanes[8];
  float s = 0;
  for (int i = 0; i < kChains256; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float x : lanes) s += x;
  }
  return s;
}

__attribute__((target("avx512f"))) float fma_loop(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_loop(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-6f), _mm512_set1_ps(1e-6f));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}

__attribute__((target("avx512f,avx512vnni"))) float vnni_loop(long iters) {
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  int64_t s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_epi32(acc[i]);
  return static_cast<float>(s);
}

struct alignas(64) TileConfig {
  uint8_t palette_id = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) float amx_loop(long iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) static thread_local uint16_t src[2][16 * 32] = {};
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, src[0], 64);
  _tile_loadd(5, src[1], 64);
  _tile_loadd(6, src[0], 64);
  _tile_loadd(7, src[1], 64);
  for (long it = 0; it < iters / 16; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

// GFLOP/s of `threads` threads each running fn(kIters); flops_per_iter per thread.
template <typename Fn>
double measure(int threads, Fn fn, double flops_per_iter) {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<std::thread> pool;
    std::vector<float> sink(threads);
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[t] = fn(kIters); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink[0] == 12345.0f) std::puts("");  // keep the result alive
    best = std::max(best, threads * flops_per_iter * kIters / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      threads = std::max(1, std::atoi(argv[i]));
    }
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "peak_flops_bench: this CPU has no AVX2 + FMA\n");
    return 1;
  }
  const double f32_avx2 = measure(threads, fma256_loop, kChains256 * 8 * 2.0);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const double f32 = avx512 ? measure(threads, fma_loop, kChains * 16 * 2.0) : 0.0;
  const double bf16 = avx512 && __builtin_cpu_supports("avx512bf16") ? measure(threads, bf16_loop, kChains * 16 * 4.0) : 0.0;
  const double int8 = avx512 && __builtin_cpu_supports("avx512vnni") ? measure(threads, vnni_loop, kChains * 64 * 2.0) : 0.0;
  // AMX: CPUID.7.0:EDX bits 22 (AMX-BF16), 24 (AMX-TILE), then the kernel's tile-data permission.
  unsigned a = 0, b = 0, c = 0, d = 0;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  const bool amx = (d & (1u << 22)) && (d & (1u << 24)) && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  // Per 16 iterations: 4 tile products of 16 x 16 x 32 multiply-adds.
  const double amx_gflops = amx ? measure(threads, amx_loop, 4.0 * 16 * 16 * 32 * 2 / 16) : 0.0;
  if (json) {
    std::printf(
        "{\"threads\":%d,\"f32_fma_avx2_gflops\":%.1f,\"f32_fma_gflops\":%.1f,\"bf16_dp_gflops\":%.1f,\"int8_vnni_gops\":%.1f,"
        "\"amx_bf16_gflops\":%.1f}\n",
        threads, f32_avx2, f32, bf16, int8, amx_gflops);
  } else {
    std::printf(
        "%d threads: f32 FMA AVX2 %.1f GFLOP/s, AVX-512 %.1f GFLOP/s, bf16 dot products %.1f GFLOP/s, int8 VNNI %.1f GOP/s, AMX bf16 %.1f "
        "GFLOP/s\n",
        threads, f32_avx2, f32, bf16, int8, amx_gflops);
  }
  return 0;
}
