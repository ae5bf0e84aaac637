// Paged attention decode per KV format and layout: one query row (by default 32 heads, 8 kv
// heads, head dim 128, blocks of 16 tokens) over a context of 1024 and 4096 tokens, for every KV
// dtype in ND and for f32/f16/bf16 in NZ. Prints one table: microseconds per call (median) and GB/s of
// KV read (the bytes of the context's blocks, K and V, scales included; GB = 1e9 B).
//
// The cache is cold-ish: calls rotate over copies of the layer (as a decode step walks the
// layers) totalling at least 128 MiB, at most 64 copies. Fixed seeds; a benchmark, never a
// test (DESIGN.md rule 9).
//
//   build/bin/kv_layout_bench [--threads 1,2] [--min-time 0.3] [--only int8] [--heads 12/12]
//                             [--head-dim 64] [--ctx 1900,4096]   (llama-110m: 12/12, 64)
//                             [--hot]   (one copy: the layer stays in cache where it fits)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace {

using namespace pagoda;
using namespace pagoda::kernels;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBlock = 16;
constexpr int64_t kColdBytes = int64_t{128} << 20;
constexpr int64_t kMaxCopies = 64;

struct Options {
  std::vector<int> threads = {1};
  double min_time_s = 0.3;
  std::string only;  // one dtype name, "" = all
  int64_t heads = 32, kv_heads = 8, head_dim = 128;
  std::vector<int64_t> ctx = {1024, 4096};
  bool hot = false;  // one copy of the layer, read again and again (in cache where it fits)
};

// "a,b,c" -> {a, b, c}
template <typename T>
std::vector<T> parse_list(const char* p) {
  std::vector<T> out;
  while (*p != '\0') {
    char* end = nullptr;
    out.push_back(static_cast<T>(std::strtol(p, &end, 10)));
    if (end == p || *end != ',') break;
    p = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      o.threads = parse_list<int>(argv[++i]);
    } else if (a == "--ctx" && i + 1 < argc) {
      o.ctx = parse_list<int64_t>(argv[++i]);
    } else if (a == "--heads" && i + 1 < argc) {
      const std::string h = argv[++i];
      o.heads = std::atoll(h.c_str());
      o.kv_heads = h.find('/') == std::string::npos ? o.heads : std::atoll(h.c_str() + h.find('/') + 1);
    } else if (a == "--hot") {
      o.hot = true;
    } else if (a == "--head-dim" && i + 1 < argc) {
      o.head_dim = std::atoll(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      o.only = argv[++i];
    } else if (a == "--min-time" && i + 1 < argc) {
      o.min_time_s = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: kv_layout_bench [--threads 1,2] [--min-time 0.3] [--only DTYPE] [--heads H/KV] "
                   "[--head-dim D] [--ctx 1024,4096] [--hot]\n");
      std::exit(2);
    }
  }
  const bool ok = o.heads > 0 && o.kv_heads > 0 && o.heads % o.kv_heads == 0 && o.head_dim > 0 && !o.ctx.empty() &&
                  std::all_of(o.ctx.begin(), o.ctx.end(), [](int64_t c) { return c > 0; }) && !o.threads.empty() &&
                  std::all_of(o.threads.begin(), o.threads.end(), [](int t) { return t > 0; });
  if (!ok) {
    std::fprintf(stderr, "kv_layout_bench: heads must divide into kv heads, every size above 0\n");
    std::exit(2);
  }
  for (int64_t& c : o.ctx) c = (c + kBlock - 1) / kBlock * kBlock;  // whole blocks
  return o;
}

// Layer copies of one format holding `ctx` tokens of random K/V (stored once, then copied).
std::vector<std::unique_ptr<KvLayerBuffer>> make_layers(const Options& o, KvDType dtype, KvLayoutKind layout,
                                                        int64_t ctx, const std::vector<int32_t>& table) {
  const int64_t kKvHeads = o.kv_heads, kHeadDim = o.head_dim;
  const int64_t num_blocks = ctx / kBlock;
  std::vector<std::unique_ptr<KvLayerBuffer>> layers;
  layers.push_back(std::make_unique<KvLayerBuffer>(dtype, layout, num_blocks, kBlock, kKvHeads, kHeadDim));
  const KvLayerView& first = layers[0]->view();
  Rng rng(42);
  const int64_t kv_dim = kKvHeads * kHeadDim;
  std::vector<float> k(ctx * kv_dim), v(ctx * kv_dim);
  for (auto& x : k) x = rng.normal();
  for (auto& x : v) x = rng.normal();
  std::vector<int64_t> slots(ctx);
  for (int64_t p = 0; p < ctx; ++p) slots[p] = int64_t{table[p / kBlock]} * kBlock + p % kBlock;
  store_kv(first, k.data(), v.data(), slots.data(), ctx);  // ctx % kBlock == 0: nothing left staged
  const int64_t layer_bytes = num_blocks * (first.k_block_bytes() + first.v_block_bytes());
  const int64_t copies = o.hot ? 1 : std::clamp<int64_t>((kColdBytes + layer_bytes - 1) / layer_bytes, 1, kMaxCopies);
  for (int64_t c = 1; c < copies; ++c) {
    layers.push_back(std::make_unique<KvLayerBuffer>(dtype, layout, num_blocks, kBlock, kKvHeads, kHeadDim));
    std::memcpy(layers.back()->view().k, first.k, num_blocks * first.k_block_bytes());
    std::memcpy(layers.back()->view().v, first.v, num_blocks * first.v_block_bytes());
  }
  return layers;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  struct Config {
    KvDType dtype;
    KvLayoutKind layout;
  };
  const int64_t kHeads = opt.heads, kKvHeads = opt.kv_heads, kHeadDim = opt.head_dim;
  std::vector<Config> configs;
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    configs.push_back({d, KvLayoutKind::kND});
    configs.push_back({d, KvLayoutKind::kNZ});
  }
  for (KvDType d : {KvDType::kFp8E4M3, KvDType::kFp8E5M2, KvDType::kInt8, KvDType::kInt4}) {
    configs.push_back({d, KvLayoutKind::kND});
  }
  std::printf("paged attention decode: 1 query row, %lld heads / %lld kv heads, head dim %lld, block %lld, ISA %s\n",
              (long long)kHeads, (long long)kKvHeads, (long long)kHeadDim, (long long)kBlock, isa_name(detect_isa()));
  std::printf("%-9s %-6s %6s %7s %12s %10s %8s %8s\n", "dtype", "layout", "ctx", "threads", "KV B/call", "us/call",
              "GB/s", "vs f32");
  for (int64_t ctx : opt.ctx) {
    std::vector<int32_t> table(ctx / kBlock);
    std::iota(table.begin(), table.end(), 0);
    Rng shuffle(7);
    for (size_t i = table.size() - 1; i > 0; --i) std::swap(table[i], table[shuffle.next_u64() % (i + 1)]);
    Rng rng(9);
    std::vector<float> q(kHeads * kHeadDim), out(kHeads * kHeadDim);
    for (auto& x : q) x = rng.normal();
    const int32_t position = static_cast<int32_t>(ctx - 1);
    const SeqSpan span{0, 1, table.data(), static_cast<int64_t>(table.size())};
    const AttentionParams params{kHeads, 1.0f / std::sqrt(static_cast<float>(kHeadDim))};
    std::vector<double> f32_us(opt.threads.size(), 0);
    for (const Config& cfg : configs) {
      if (!opt.only.empty() && opt.only != kv_dtype_name(cfg.dtype)) continue;
      auto layers = make_layers(opt, cfg.dtype, cfg.layout, ctx, table);
      const KvLayerView& v0 = layers[0]->view();
      const int64_t kv_bytes = (ctx / kBlock) * (v0.k_block_bytes() + v0.v_block_bytes());
      for (size_t ti = 0; ti < opt.threads.size(); ++ti) {
        const int threads = opt.threads[ti];
        ThreadPool pool(threads);
        AttentionScratch scratch(threads, ctx, kHeadDim);
        size_t next = 0;
        auto call = [&] {
          paged_attention(layers[next]->view(), q.data(), &position, &span, 1, params, out.data(), pool, scratch);
          next = (next + 1) % layers.size();
        };
        for (size_t i = 0; i < layers.size(); ++i) call();  // warm-up: one pass over the copies
        std::vector<double> times_us;
        const auto start = Clock::now();
        while (times_us.size() < 5 || std::chrono::duration<double>(Clock::now() - start).count() < opt.min_time_s) {
          const auto t0 = Clock::now();
          call();
          times_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        const double us = median(times_us);
        if (cfg.dtype == KvDType::kF32 && cfg.layout == KvLayoutKind::kND) f32_us[ti] = us;
        std::printf("%-9s %-6s %6lld %7d %12lld %10.1f %8.2f %7.2fx\n", std::string(kv_dtype_name(cfg.dtype)).c_str(),
                    std::string(kv_layout_name(cfg.layout)).c_str(), (long long)ctx, threads, (long long)kv_bytes, us,
                    kv_bytes / us * 1e-3, f32_us[ti] / us);
      }
    }
  }
  return 0;
}
