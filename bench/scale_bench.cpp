// Costs at scale (issue 31, point 5): how the KV cache's and the router's data structures' per-op
// cost and memory grow with their size. Single-threaded, wall time per op (steady clock), RSS
// from /proc/self/statm. Prints one JSON object; bench/plot_scale.py draws it as SVG.
//
//   scale_bench [max_blocks=10000000] [max_workers=1000]
//
// Block manager over a pool without KV memory of N blocks (block 16), filled with cached
// 1,024-token prompts (64 blocks each) until every block is cached; then per op, averaged:
//   match     match_prefix of a cached 1,024-token prompt (64 blocks confirmed), dropped
//   admit     match + add_sequence + adopt + append the rest + commit + free of a new prompt
//             that shares its first half with a cached one (32 blocks evicted, 32 registered)
//   bytes/block  RSS growth of building and filling the pool / N
// Router: W workers' block indexes (events/block_index.h) of 100,000 blocks each feeding the
// router's inverted index (events/holder_index.h), then per request a 64-block chain scored on
// every worker and the policy's choice:
//   route     one HolderIndex match for all W workers (the router's way)
//   probe_each_worker  matched_blocks on every worker's index (the way before; same choices)
// Events: encode + decode of a BlockStored batch of 64 blocks (msgpack, vLLM's format).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "events/block_index.h"
#include "events/event_codec.h"
#include "events/holder_index.h"
#include "kvcache/block_manager.h"
#include "router/policy.h"

namespace {

using namespace pagoda;
using Clock = std::chrono::steady_clock;

int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

std::vector<int32_t> prompt(uint64_t seed, int64_t n) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng.next_u64() % 32000);
  return t;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string block_manager_row(int64_t n_blocks) {
  constexpr int64_t kBs = 16, kPrompt = 1024;
  const int64_t rss0 = rss_bytes();
  kvcache::KvLayout layout;
  layout.n_layer = 1;
  layout.n_kv_head = 1;
  layout.head_dim = 2;
  layout.block_size = kBs;
  kvcache::BlockPool pool = kvcache::BlockPool::create_without_memory(layout, n_blocks).value();
  kvcache::BlockManager bm(pool);
  const kvcache::KvNamespace ns;
  std::vector<int64_t> slots(kPrompt);
  std::vector<kvcache::BlockCopy> copies;
  auto run_prompt = [&](const std::vector<int32_t>& p) {
    kvcache::PrefixMatch hit = bm.match_prefix(p, ns);
    const int64_t cached = hit.num_tokens();
    const kvcache::SeqId s = bm.add_sequence(kPrompt);
    bm.adopt(s, std::move(hit));
    bm.append(s, std::span<const int32_t>(p).subspan(static_cast<size_t>(cached)), slots, copies);
    bm.commit(s);
    bm.free_sequence(s);
  };
  const int64_t fills = n_blocks / (kPrompt / kBs);
  const auto t_fill = Clock::now();
  for (int64_t i = 0; i < fills; ++i) run_prompt(prompt(static_cast<uint64_t>(i) + 1, kPrompt));
  const double fill_s = seconds_since(t_fill);
  const int64_t rss1 = rss_bytes();
  // match: a cached prompt (the most recent ones are surely still cached)
  const int reps = 2000;
  const auto t_match = Clock::now();
  int64_t matched = 0;
  for (int r = 0; r < reps; ++r) {
    const std::vector<int32_t> p = prompt(static_cast<uint64_t>(fills - (r % 8)), kPrompt);
    matched += bm.match_prefix(p, ns).num_tokens();
  }
  const double match_s = seconds_since(t_match) / reps;
  // admit: half cached, half new (evicts 32 blocks)
  const auto t_admit = Clock::now();
  for (int r = 0; r < reps; ++r) {
    std::vector<int32_t> p = prompt(static_cast<uint64_t>(fills - (r % 8)), kPrompt);
    const std::vector<int32_t> fresh = prompt(static_cast<uint64_t>(1000000000 + r + n_blocks), kPrompt / 2);
    std::copy(fresh.begin(), fresh.end(), p.begin() + kPrompt / 2);
    run_prompt(p);
  }
  const double admit_s = seconds_since(t_admit) / reps;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"blocks\": %lld, \"fill_s\": %.3f, \"match_us\": %.3f, \"admit_us\": %.3f, \"bytes_per_block\": %.1f, "
                "\"matched_tokens_per_match\": %.1f, \"evictions\": %lld}",
                (long long)n_blocks, fill_s, match_s * 1e6, admit_s * 1e6,
                static_cast<double>(rss1 - rss0) / static_cast<double>(n_blocks), static_cast<double>(matched) / reps,
                (long long)bm.stats().num_evictions);
  return buf;
}

// The router's choice at `workers` workers of 100 k blocks each (a tenth hold the request's
// 64-block prefix): per-worker probes (each worker's BlockIndex, one DRAM miss per worker: the
// router before the inverted index) and one HolderIndex match (what RouterServer::choose does).
std::string router_row(int workers) {
  constexpr int64_t kBlocksPerWorker = 100000, kChain = 64;
  const int64_t rss0 = rss_bytes();
  events::HolderIndex holders;
  std::vector<std::unique_ptr<events::BlockIndex>> idx;
  Rng rng(7);
  std::vector<uint64_t> shared(kChain);
  for (auto& h : shared) h = rng.next_u64();
  std::vector<uint64_t> hashes(kBlocksPerWorker);
  for (int w = 0; w < workers; ++w) {
    idx.push_back(std::make_unique<events::BlockIndex>(&holders, w));
    for (auto& h : hashes) h = rng.next_u64();
    if (w % 10 == 0) std::copy(shared.begin(), shared.end(), hashes.begin());  // a tenth hold the prefix
    idx.back()->insert("GPU", hashes);
  }
  const int64_t rss1 = rss_bytes();
  const int reps = std::max(20, 20000 / workers);
  std::vector<router::WorkerLoad> loads(static_cast<size_t>(workers));
  const router::RequestCost cost{kChain * 16, kChain + 8, 16};
  const auto t0 = Clock::now();
  int64_t best = 0;
  for (int r = 0; r < reps; ++r) {
    for (int w = 0; w < workers; ++w) {
      loads[static_cast<size_t>(w)].available = true;
      loads[static_cast<size_t>(w)].overlap_blocks = idx[static_cast<size_t>(w)]->matched_blocks(shared);
    }
    best += router::choose_worker(router::RoutingPolicy::kKvAware, loads, cost, 1.0, static_cast<uint64_t>(r)).worker;
  }
  const double probe_s = seconds_since(t0) / reps;
  std::vector<int64_t> matched(static_cast<size_t>(workers));
  const auto t1 = Clock::now();
  int64_t best_inverted = 0;
  for (int r = 0; r < reps; ++r) {
    holders.match(shared, matched);
    for (int w = 0; w < workers; ++w) {
      loads[static_cast<size_t>(w)].available = true;
      loads[static_cast<size_t>(w)].overlap_blocks = matched[static_cast<size_t>(w)];
    }
    best_inverted += router::choose_worker(router::RoutingPolicy::kKvAware, loads, cost, 1.0, static_cast<uint64_t>(r)).worker;
  }
  const double route_s = seconds_since(t1) / reps;
  CHECK_EQ(best, best_inverted);  // the same choices
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "{\"workers\": %d, \"blocks_per_worker\": %lld, \"route_us\": %.3f, \"route_us_per_worker\": %.4f, "
                "\"probe_each_worker_us\": %.3f, \"index_bytes_per_block\": %.1f, \"picks_sum\": %lld}",
                workers, (long long)kBlocksPerWorker, route_s * 1e6, route_s * 1e6 / workers, probe_s * 1e6,
                static_cast<double>(rss1 - rss0) / static_cast<double>(workers * kBlocksPerWorker), (long long)best);
  return buf;
}

std::string events_row() {
  events::KvEventBatch batch;
  events::KvEvent e;
  e.type = events::KvEventType::kBlockStored;
  e.block_size = 16;
  e.medium = "GPU";
  Rng rng(3);
  for (int i = 0; i < 64; ++i) e.block_hashes.push_back(rng.next_u64());
  for (int i = 0; i < 64 * 16; ++i) e.token_ids.push_back(static_cast<int32_t>(rng.next_u64() % 32000));
  batch.events.push_back(e);
  const int reps = 20000;
  std::string out;
  const auto t0 = Clock::now();
  size_t decoded_events = 0;
  for (int r = 0; r < reps; ++r) {
    out.clear();  // encode_batch appends
    events::encode_batch(batch, events::EventEncoding{}, out);
    auto decoded = events::decode_batch(out);
    decoded_events += decoded.is_ok() ? decoded->events.size() : 0;
  }
  if (decoded_events != static_cast<size_t>(reps)) std::fprintf(stderr, "scale_bench: a batch did not decode\n");
  const size_t bytes = out.size();
  const double s = seconds_since(t0) / reps;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "{\"blocks_per_batch\": 64, \"encode_decode_us\": %.3f, \"blocks_per_s\": %.0f, \"bytes\": %zu}",
                s * 1e6, 64 / s, bytes);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_blocks = argc > 1 ? std::atoll(argv[1]) : 10000000;
  const int max_workers = argc > 2 ? std::atoi(argv[2]) : 1000;
  std::printf("{\"block_manager\": [");
  bool first = true;
  for (int64_t n = 10000; n <= max_blocks; n *= 10) {
    std::printf("%s\n  %s", first ? "" : ",", block_manager_row(n).c_str());
    std::fflush(stdout);
    first = false;
  }
  std::printf("],\n\"router\": [");
  first = true;
  for (int w = 10; w <= max_workers; w *= 10) {
    std::printf("%s\n  %s", first ? "" : ",", router_row(w).c_str());
    std::fflush(stdout);
    first = false;
  }
  std::printf("],\n\"events\": %s}\n", events_row().c_str());
  return 0;
}
