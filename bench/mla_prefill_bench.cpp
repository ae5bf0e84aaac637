// MLA prefill attention: the row walk (kernels::mla_attention), the absorbed GEMM path
// (kernels::mla_attention_gemm) and the expanded GEMM path (kernels::mla_attention_expanded)
// on one prefill chunk of T rows at the end of a sequence of n_ctx positions,
// DeepSeek-V2-Lite's attention by default (16 heads, latent 512 + 64, nope 128, values 128), a
// latent cache of the given dtype. Rounds rotate the order; prints the medians of the
// per-round ratios (row walk / absorbed GEMM, absorbed GEMM / expanded) with min-max, the time
// and GFLOP/s of each in its own arithmetic (absorbed: 2 x attended (row, position) pairs x
// heads x (L + r); expanded: 2 x pairs x heads x (nope + rope + v) + 2 x n_ctx x heads x r x
// (nope + v) to decompress; the absorbed forms' query absorption and up-projection, which the
// model runs around them, are not timed), and the largest difference between the row walk's
// and the absorbed GEMM's outputs.
//   build/bin/mla_prefill_bench [n_ctx 4096] [T 512] [rounds 5] [threads 0=all] [dtype f16]
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
  const int64_t T = argc > 2 ? std::atoll(argv[2]) : 512;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const int threads_arg = argc > 4 ? std::atoi(argv[4]) : 0;
  const auto dtype = kv_dtype_from_name(argc > 5 ? argv[5] : "f16");
  if (!dtype || T < 1 || n_ctx < T || rounds < 1) {
    std::fprintf(stderr, "usage: mla_prefill_bench [n_ctx] [T <= n_ctx] [rounds] [threads] [dtype]\n");
    return 2;
  }
  const int64_t H = 16, r = 512, dr = 64, L = r + dr, B = 16, dn = 128, dv = 128, qh = dn + dr;
  const int threads = threads_arg > 0 ? threads_arg : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  const int64_t n_blocks = (n_ctx + B - 1) / B;
  KvLayerBuffer buf(*dtype, KvLayoutKind::kND, n_blocks, B, 1, L, 8, /*k_only=*/true);
  Rng rng(5);
  std::vector<int32_t> table(n_blocks);
  std::iota(table.begin(), table.end(), 0);
  for (size_t i = table.size() - 1; i > 0; --i) std::swap(table[i], table[rng.next_u64() % (i + 1)]);
  std::vector<float> latents(n_ctx * L);
  for (float& x : latents) x = rng.normal();
  std::vector<int64_t> slots(n_ctx);
  for (int64_t p = 0; p < n_ctx; ++p) slots[p] = int64_t{table[p / B]} * B + p % B;
  store_kv(buf.view(), latents.data(), nullptr, slots.data(), n_ctx);
  std::vector<float> q(T * H * L);
  for (float& x : q) x = rng.normal() * 0.05f;
  std::vector<int32_t> positions(T);
  for (int64_t t = 0; t < T; ++t) positions[t] = static_cast<int32_t>(n_ctx - T + t);
  const SeqSpan seq{0, T, table.data(), n_blocks};
  const AttentionParams params{H, 1.0f / std::sqrt(192.0f), 0, 0};
  AttentionScratch scratch(threads, n_ctx, L);
  MlaGemmScratch gemm(threads, T, H, L);
  gemm.reserve_expanded(qh, dv);
  std::vector<float> out_row(T * H * r), out_gemm(T * H * r), out_exp(T * H * dv);
  std::vector<float> wk_b(H * r * dn), wv_b(H * dv * r), q_exp(T * H * qh);
  for (float& x : wk_b) x = rng.normal() * 0.04f;
  for (float& x : wv_b) x = rng.normal() * 0.04f;
  for (float& x : q_exp) x = rng.normal() * 0.05f;
  const MlaUpProjection up{wk_b.data(), wv_b.data(), r, dn, dv};
  const auto row_walk = [&] { mla_attention(buf.view(), q.data(), positions.data(), &seq, 1, params, r, out_row.data(), pool, scratch); };
  const auto tiled = [&] { mla_attention_gemm(buf.view(), q.data(), positions.data(), seq, params, r, out_gemm.data(), gemm, pool); };
  const auto expanded = [&] {
    mla_attention_expanded(buf.view(), q_exp.data(), positions.data(), seq, params, up, out_exp.data(), gemm, pool);
  };
  const auto time = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  time(row_walk);  // warm-up
  time(tiled);
  time(expanded);
  double attended = 0;
  for (int64_t t = 0; t < T; ++t) attended += static_cast<double>(positions[t]) + 1;
  const double flops = 2.0 * attended * static_cast<double>(H) * static_cast<double>(L + r);
  const double flops_exp = 2.0 * attended * static_cast<double>(H * (qh + dv)) +
                           2.0 * static_cast<double>(n_ctx * H * r * (dn + dv));
  std::vector<double> ratios, ratios_exp, t_row, t_gemm, t_exp;
  for (int i = 0; i < rounds; ++i) {
    double a = 0, b = 0, c = 0;
    for (int k = 0; k < 3; ++k) {  // round i starts with form i % 3
      switch ((i + k) % 3) {
        case 0: a = time(row_walk); break;
        case 1: b = time(tiled); break;
        default: c = time(expanded); break;
      }
    }
    t_row.push_back(a);
    t_gemm.push_back(b);
    t_exp.push_back(c);
    ratios.push_back(a / b);
    ratios_exp.push_back(b / c);
  }
  double worst = 0;
  for (size_t i = 0; i < out_row.size(); ++i) worst = std::max(worst, std::fabs(double(out_row[i]) - out_gemm[i]));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("{\"n_ctx\": %lld, \"rows\": %lld, \"heads\": %lld, \"latent\": %lld, \"dtype\": \"%s\", \"threads\": %d, "
              "\"row_walk_s\": %.4f, \"gemm_s\": %.4f, \"expanded_s\": %.4f, \"row_walk_gflops\": %.1f, "
              "\"gemm_gflops\": %.1f, \"expanded_gflops\": %.1f, \"ratio_median\": %.2f, \"ratio_min\": %.2f, "
              "\"ratio_max\": %.2f, \"expanded_ratio_median\": %.2f, \"expanded_ratio_min\": %.2f, "
              "\"expanded_ratio_max\": %.2f, \"max_abs_diff\": %.2e}\n",
              (long long)n_ctx, (long long)T, (long long)H, (long long)L, std::string(kv_dtype_name(*dtype)).c_str(), threads,
              median(t_row), median(t_gemm), median(t_exp), flops / median(t_row) / 1e9, flops / median(t_gemm) / 1e9,
              flops_exp / median(t_exp) / 1e9, median(ratios), *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()), median(ratios_exp),
              *std::min_element(ratios_exp.begin(), ratios_exp.end()),
              *std::max_element(ratios_exp.begin(), ratios_exp.end()), worst);
  return 0;
}
