// The Redis tier on real KV: llama-110m (or any GGUF) prefills prompts cold, every committed
// block is captured (as write-through would put it), then for each codec the blocks are put
// into Redis and the 1,024-token and ~1,900-token prefixes fetched back. Prints wire bytes per
// token, compression ratio and CPU, put/get times, and the cold prefill time of the same
// prefixes (what a Redis hit replaces). Fixed seeds; run it under `heavy`.
//
//   redis_tier_bench MODEL.gguf REDIS_URL [kv_dtype=f16] [threads=2] [reps=5]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <poll.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "kvcache/block_events.h"
#include "model/format/gguf.h"
#include "store/redis_tier.h"

namespace pagoda {
namespace {

// Copies every committed block (tokens + payload in block_segments order).
struct Capture final : kvcache::BlockEventListener {
  explicit Capture(kvcache::BlockPool& pool) : pool(pool) {}
  struct Block {
    kvcache::BlockRecordMeta meta;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
    std::vector<kvcache::ConstByteSpan> views;
  };
  void on_blocks_stored(std::span<const kvcache::BlockInfo> chain) override {
    std::vector<kvcache::ByteSpan> segs(static_cast<size_t>(2 * pool.layout().n_layer));
    for (const kvcache::BlockInfo& info : chain) {
      Block b;
      b.meta = kvcache::record_meta_for(pool.layout());
      b.meta.ns = info.ns;
      b.meta.block_hash = info.hash;
      b.meta.parent_hash = info.parent_hash;
      b.tokens.assign(info.tokens.begin(), info.tokens.end());
      pool.block_segments(info.block, segs);
      for (kvcache::ByteSpan s : segs) b.payload.insert(b.payload.end(), s.begin(), s.end());
      blocks.push_back(std::move(b));
    }
  }
  void on_block_evicted(const kvcache::BlockInfo&) override {}
  kvcache::BlockPool& pool;
  std::vector<Block> blocks;
};

kvcache::TierCompletion wait_op(store::RedisTier& tier, kvcache::TierOpId id) {
  std::vector<kvcache::TierCompletion> out;
  for (;;) {
    tier.poll(out);
    for (const auto& c : out) {
      if (c.op == id) return c;
    }
    pollfd pfd{tier.completion_fd(), POLLIN, 0};
    (void)::poll(&pfd, 1, 10'000);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf REDIS_URL [kv_dtype=f16] [threads=2] [reps=5]\n", argv[0]);
    return 2;
  }
  const std::string url = argv[2];
  const auto dtype = kernels::kv_dtype_from_name(argc > 3 ? argv[3] : "f16");
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 5;
  if (!dtype) return std::fprintf(stderr, "unknown kv dtype\n"), 2;
  auto file = model::GgufFile::read(argv[1]);
  if (!file.is_ok()) return std::fprintf(stderr, "%s\n", file.status().message().c_str()), 1;
  auto loaded = model::LlamaModel::load(std::move(file).value());
  if (!loaded.is_ok()) return std::fprintf(stderr, "%s\n", loaded.status().message().c_str()), 1;
  std::shared_ptr<const model::LlamaModel> m = std::move(loaded).value();
  SteadyClock clock;
  Logger logger(LogLevel::kWarn);
  engine::EngineConfig ec;
  ec.num_threads = threads;
  ec.kv_dtype = *dtype;
  ec.max_context = 2048;
  ec.kv_cache_bytes = int64_t{1} << 30;
  auto eng_or = engine::Engine::create(m, ec, clock, logger);
  if (!eng_or.is_ok()) return std::fprintf(stderr, "%s\n", eng_or.status().message().c_str()), 1;
  engine::Engine& eng = **eng_or;
  Capture capture(eng.block_manager().pool());
  eng.block_manager().add_listener(&capture);

  // Cold prefills (distinct random prompts each time, so nothing is cached).
  const int64_t lengths[2] = {1025, 1905};  // 1,024 and 1,904 cached-able tokens (64, 119 blocks)
  double cold_ms[2] = {0, 0};
  Rng rng(2024);
  std::vector<int32_t> long_prompt;
  for (int li = 0; li < 2; ++li) {
    std::vector<double> ms;
    for (int r = 0; r < std::max(3, reps / 2); ++r) {
      engine::GenerateRequest req;
      req.prompt.resize(static_cast<size_t>(lengths[li]));
      for (int32_t& t : req.prompt) t = static_cast<int32_t>(3 + rng.next_u64() % (m->config().n_vocab - 3));
      req.max_new_tokens = 1;
      auto res = eng.generate(req);
      if (!res.is_ok()) return std::fprintf(stderr, "%s\n", res.status().message().c_str()), 1;
      ms.push_back(res->stats.ttft_s * 1e3);
      if (li == 1 && r == 0) long_prompt = req.prompt;
    }
    cold_ms[li] = median(ms);
  }
  // The blocks of the first long prompt: the 119 committed after the 1,025-token runs' blocks.
  const int64_t first_long = static_cast<int64_t>(std::max(3, reps / 2)) * 64;
  std::vector<Capture::Block> chain(capture.blocks.begin() + first_long, capture.blocks.begin() + first_long + 119);
  for (auto& b : chain) b.views = {kvcache::ConstByteSpan(b.payload.data(), b.payload.size())};
  eng.block_manager().remove_listener(&capture);
  const kvcache::KvLayout layout = eng.kv_layout();
  const int64_t rec = kvcache::record_bytes(chain[0].meta);
  std::printf("redis_tier_bench: %s, KV %s, %lld B per block record (%lld tokens), %d threads, Redis %s\n", argv[1],
              std::string(kernels::kv_dtype_name(*dtype)).c_str(), static_cast<long long>(rec),
              static_cast<long long>(layout.block_size), threads, url.c_str());
  std::printf("cold prefill (TTFT, median): 1,024-token prefix %.1f ms, 1,904-token prefix %.1f ms\n", cold_ms[0], cold_ms[1]);
  std::printf("%-12s %12s %7s %13s %13s %10s %12s %12s %9s %9s\n", "codec", "wire B/token", "ratio", "compress us/blk",
              "decomp us/blk", "put ms/119", "get ms/1024", "get ms/1904", "x cold1k", "x cold2k");

  struct Codec {
    const char* name;
    store::RedisCompression c;
    int level;
    bool shuffle;
  };
  const Codec codecs[] = {{"none", store::RedisCompression::kNone, 0, false},
                          {"lz4", store::RedisCompression::kLz4, 1, false},
                          {"lz4+shuf", store::RedisCompression::kLz4, 1, true},
                          {"zstd1", store::RedisCompression::kZstd, 1, false},
                          {"zstd1+shuf", store::RedisCompression::kZstd, 1, true},
                          {"zstd3+shuf", store::RedisCompression::kZstd, 3, true}};
  for (const Codec& codec : codecs) {
    if (std::system(("redis-cli -u " + url + " FLUSHALL > /dev/null").c_str()) != 0) return 1;
    store::RedisTierConfig c;
    auto topo = store::parse_redis_urls({url});
    if (!topo.is_ok()) return std::fprintf(stderr, "%s\n", topo.status().message().c_str()), 2;
    c.topology = *topo;
    c.layout = layout;
    c.model_fingerprint = chain[0].meta.ns.model_fingerprint;
    c.kv_format = chain[0].meta.ns.kv_format;
    c.compression = codec.c;
    c.compression_level = codec.level;
    c.shuffle = codec.shuffle;
    c.pipeline_window_bytes = int64_t{8} << 20;
    auto tier_or = store::RedisTier::create(c, &clock);
    if (!tier_or.is_ok() || !(*tier_or)->enabled()) return std::fprintf(stderr, "redis tier down\n"), 1;
    store::RedisTier& tier = **tier_or;
    std::vector<kvcache::TierPut> puts;
    for (const auto& b : chain) puts.push_back({b.meta, b.tokens, b.views, 0});
    const int64_t t0 = clock.now_ns();
    const kvcache::TierCompletion put = wait_op(tier, tier.put(puts));
    const double put_ms = (clock.now_ns() - t0) * 1e-6;
    if (put.num_ok != 119) return std::fprintf(stderr, "put: %s\n", put.status.message().c_str()), 1;
    // Destinations: one pool-block-sized buffer per block, split as block_segments are.
    std::vector<std::vector<uint8_t>> dest(119, std::vector<uint8_t>(static_cast<size_t>(layout.bytes_per_block())));
    std::vector<std::vector<kvcache::ByteSpan>> segs(119);
    std::vector<std::vector<int32_t>> toks(119, std::vector<int32_t>(static_cast<size_t>(layout.block_size)));
    std::vector<kvcache::TierGet> gets;
    for (size_t i = 0; i < 119; ++i) {
      int64_t at = 0;
      for (int64_t l = 0; l < layout.n_layer; ++l) {
        segs[i].emplace_back(dest[i].data() + at, static_cast<size_t>(layout.k_block_bytes()));
        at += layout.k_block_bytes();
        segs[i].emplace_back(dest[i].data() + at, static_cast<size_t>(layout.v_block_bytes()));
        at += layout.v_block_bytes();
      }
      gets.push_back({chain[i].meta.block_hash, chain[i].meta.ns, segs[i], toks[i]});
    }
    double get_ms[2];
    const int64_t dec0 = tier.redis_stats().decompress_ns;
    int64_t got_blocks = 0;
    for (int li = 0; li < 2; ++li) {
      const size_t n = li == 0 ? 64 : 119;
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        const int64_t g0 = clock.now_ns();
        const kvcache::TierCompletion got = wait_op(tier, tier.get({gets.data(), n}));
        ms.push_back((clock.now_ns() - g0) * 1e-6);
        if (got.num_ok != static_cast<int64_t>(n)) return std::fprintf(stderr, "get: %s\n", got.status.message().c_str()), 1;
        got_blocks += got.num_ok;
      }
      get_ms[li] = median(ms);
    }
    if (std::memcmp(dest[118].data(), chain[118].payload.data(), chain[118].payload.size()) != 0) {
      return std::fprintf(stderr, "payload mismatch\n"), 1;
    }
    const store::RedisTierStats s = tier.redis_stats();
    const double wire = static_cast<double>(tier.stats().bytes_written);
    std::printf("%-12s %12.0f %7.2f %13.1f %13.1f %10.1f %12.1f %12.1f %9.1f %9.1f\n", codec.name,
                wire / (119.0 * layout.block_size), static_cast<double>(s.raw_bytes_written) / wire,
                s.compress_ns * 1e-3 / 119.0, (s.decompress_ns - dec0) * 1e-3 / static_cast<double>(got_blocks), put_ms,
                get_ms[0], get_ms[1], cold_ms[0] / get_ms[0], cold_ms[1] / get_ms[1]);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) { return pagoda::run(argc, argv); }
