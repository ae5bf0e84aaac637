// MLA decode attention: the row walk (kernels::mla_attention) against the GEMMs over heads
// (kernels::mla_attention_heads_gemm) for `seqs` sequences of one decode row each at depth
// n_ctx, DeepSeek-V2-Lite's attention by default (16 heads, latent 512 + 64), a latent cache of
// the given dtype. Rounds alternate the order; prints the median of the per-round ratios (row
// walk time / GEMM time) with min-max, the time per layer of each, GFLOP/s in the absorbed
// form's arithmetic (2 x seqs x n_ctx x heads x (L + r)), the bytes of latent cache read per
// layer and the largest difference between the two outputs.
//   build/bin/mla_decode_bench [n_ctx 4096] [seqs 1] [rounds 7] [threads 0=all] [dtype f16] [heads 16]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "kernels/kv_store.h"
#include "kernels/mla_attention.h"

using namespace pagoda;
using namespace pagoda::kernels;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int64_t n_ctx = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t n_seqs = argc > 2 ? std::atoll(argv[2]) : 1;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  const int threads_arg = argc > 4 ? std::atoi(argv[4]) : 0;
  const auto dtype = kv_dtype_from_name(argc > 5 ? argv[5] : "f16");
  const int64_t H = argc > 6 ? std::atoll(argv[6]) : 16;
  if (!dtype || n_ctx < 1 || n_seqs < 1 || n_seqs > 64 || rounds < 1 || H < 1) {
    std::fprintf(stderr, "usage: mla_decode_bench [n_ctx] [seqs <= 64] [rounds] [threads] [dtype] [heads]\n");
    return 2;
  }
  const int64_t r = 512, dr = 64, L = r + dr, B = 16;
  const int threads = threads_arg > 0 ? threads_arg : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  const int64_t per_seq = (n_ctx + B - 1) / B;
  KvLayerBuffer buf(*dtype, KvLayoutKind::kND, per_seq * n_seqs, B, 1, L, 8, /*k_only=*/true);
  Rng rng(5);
  std::vector<int32_t> table(per_seq * n_seqs);
  std::iota(table.begin(), table.end(), 0);
  for (size_t i = table.size() - 1; i > 0; --i) std::swap(table[i], table[rng.next_u64() % (i + 1)]);
  std::vector<float> latents(n_ctx * L);
  std::vector<int64_t> slots(n_ctx);
  std::vector<SeqSpan> seqs;
  std::vector<int32_t> positions(n_seqs, static_cast<int32_t>(n_ctx - 1));
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (float& x : latents) x = rng.normal();
    const int32_t* t = table.data() + s * per_seq;
    for (int64_t p = 0; p < n_ctx; ++p) slots[p] = int64_t{t[p / B]} * B + p % B;
    store_kv(buf.view(), latents.data(), nullptr, slots.data(), n_ctx);
    seqs.push_back({s, 1, t, per_seq});
  }
  std::vector<float> q(n_seqs * H * L);
  for (float& x : q) x = rng.normal() * 0.05f;
  const AttentionParams params{H, 1.0f / std::sqrt(192.0f), 0, 0};
  AttentionScratch scratch(threads, n_ctx, L);
  MlaGemmScratch gemm(threads, n_seqs, H, L);
  std::vector<float> out_row(n_seqs * H * r), out_gemm(n_seqs * H * r);
  const auto row_walk = [&] {
    mla_attention(buf.view(), q.data(), positions.data(), seqs.data(), n_seqs, params, r, out_row.data(), pool, scratch);
  };
  const auto heads = [&] {
    for (const SeqSpan& s : seqs) {
      mla_attention_heads_gemm(buf.view(), q.data(), positions.data(), s, params, r, out_gemm.data(), gemm, pool);
    }
  };
  const auto time = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  time(row_walk);  // warm-up
  time(heads);
  const double flops = 2.0 * static_cast<double>(n_seqs * n_ctx * H * (L + r));
  std::vector<double> ratios, t_row, t_gemm;
  for (int i = 0; i < rounds; ++i) {
    double a, b;
    if (i % 2 == 0) {
      a = time(row_walk);
      b = time(heads);
    } else {
      b = time(heads);
      a = time(row_walk);
    }
    t_row.push_back(a);
    t_gemm.push_back(b);
    ratios.push_back(a / b);
  }
  double worst = 0;
  for (size_t i = 0; i < out_row.size(); ++i) worst = std::max(worst, std::fabs(double(out_row[i]) - out_gemm[i]));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("{\"n_ctx\": %lld, \"seqs\": %lld, \"heads\": %lld, \"latent\": %lld, \"dtype\": \"%s\", \"threads\": %d, "
              "\"row_walk_ms\": %.3f, \"heads_gemm_ms\": %.3f, \"row_walk_gflops\": %.1f, \"heads_gemm_gflops\": %.1f, "
              "\"cache_mb\": %.2f, \"ratio_median\": %.2f, \"ratio_min\": %.2f, \"ratio_max\": %.2f, "
              "\"max_abs_diff\": %.2e}\n",
              (long long)n_ctx, (long long)n_seqs, (long long)H, (long long)L, std::string(kv_dtype_name(*dtype)).c_str(),
              threads, 1e3 * median(t_row), 1e3 * median(t_gemm), flops / median(t_row) / 1e9,
              flops / median(t_gemm) / 1e9, static_cast<double>(buf.view().k_block_bytes() * per_seq * n_seqs) / 1e6,
              median(ratios), *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()), worst);
  return 0;
}
