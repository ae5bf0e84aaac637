// Block map, largest cached prefixes and histogram quantiles (engine/kv_inspect.h,
// engine/introspection.h).
#include <algorithm>
#include <cmath>

#include "engine/kv_inspect.h"

namespace pagoda::engine {

double histogram_quantile(const Histogram& h, double q) {
  // Prometheus's bucketQuantile over cumulative buckets, +Inf last.
  const size_t n_finite = Histogram::kBounds.size();
  int64_t total = 0;
  for (int64_t c : h.buckets) total += c;
  if (total == 0) return 0;
  const double rank = q * static_cast<double>(total);
  int64_t cumulative = 0;
  for (size_t b = 0; b < n_finite; ++b) {
    const int64_t before = cumulative;
    cumulative += h.buckets[b];
    if (static_cast<double>(cumulative) >= rank) {
      const double start = b == 0 ? 0.0 : Histogram::kBounds[b - 1];
      const double end = Histogram::kBounds[b];
      const double in_bucket = static_cast<double>(cumulative - before);
      return start + (end - start) * ((rank - static_cast<double>(before)) / in_bucket);
    }
  }
  return Histogram::kBounds[n_finite - 1];
}

HistogramSummary summarize(const Histogram& h) {
  HistogramSummary s;
  s.count = h.count;
  s.sum = h.sum;
  s.p50 = histogram_quantile(h, 0.5);
  s.p90 = histogram_quantile(h, 0.9);
  s.p99 = histogram_quantile(h, 0.99);
  return s;
}

void snapshot_pool(const kvcache::BlockManager& bm, bool block_map, KvSnapshot& out) {
  const kvcache::BlockPool& pool = bm.pool();
  const kvcache::KvLayout& layout = pool.layout();
  out.num_blocks = pool.num_blocks();
  out.block_size = layout.block_size;
  out.bytes_per_block = layout.bytes_per_block();
  out.kv_dtype = kernels::kv_dtype_name(layout.dtype);
  out.kv_layout = kernels::kv_layout_name(layout.layout);
  out.eviction_policy = kvcache::eviction_policy_name(bm.eviction_policy());
  out.blocks_free = pool.num_free();
  out.blocks_in_use = pool.num_in_use();
  out.blocks_cached = pool.num_cached();
  out.blocks_pinned = 0;
  out.blocks_loading = 0;
  if (block_map) out.block_map.assign(static_cast<size_t>(out.num_blocks), kBlockFree);
  for (int32_t b = 0; b < static_cast<int32_t>(out.num_blocks); ++b) {
    const kvcache::BlockState state = pool.state(b);
    char c = kBlockFree;
    if (state == kvcache::BlockState::kInUse) {
      c = kBlockInUse;
    } else if (state == kvcache::BlockState::kCached) {
      c = bm.pin_count(b) > 0 ? kBlockPinned : kBlockCached;
      if (c == kBlockPinned) ++out.blocks_pinned;
    }
    if (block_map) out.block_map[static_cast<size_t>(b)] = c;
  }
  std::vector<int32_t> loading;
  bm.append_all_loading_blocks(loading);
  out.blocks_loading = static_cast<int64_t>(loading.size());
  if (block_map) {
    for (int32_t b : loading) out.block_map[static_cast<size_t>(b)] = kBlockLoading;
  }
  TierSnapshot row;
  row.tier = "pool";
  row.medium = "GPU";          // on the wire, as vLLM's events name the pool
  row.memory = "host DRAM";    // what it is: Pagoda's pool lives in host memory
  row.capacity_blocks = out.num_blocks;
  row.used_blocks = out.blocks_in_use + out.blocks_cached;
  row.evictions = bm.stats().num_evictions;
  out.tiers.clear();
  out.tiers.push_back(std::move(row));
}

void snapshot_tiers(const kvcache::TierStack& tiers, KvSnapshot& out) {
  for (int t = 0; t < tiers.num_tiers(); ++t) {
    const kvcache::Tier& tier = tiers.tier(t);
    const kvcache::TierStats st = tier.stats();
    const kvcache::TierCounters& c = tiers.counters(t);
    TierSnapshot row;
    row.tier = std::string(tier.name());
    row.medium = std::string(tier.medium());
    row.memory = std::string(tier.memory());
    row.enabled = tier.enabled();
    row.capacity_blocks = st.capacity_blocks;
    row.used_blocks = st.used_blocks;
    row.hit_blocks = c.loaded_blocks;
    row.evictions = st.evictions;
    row.lookups = st.lookups;
    row.lookup_hit_blocks = st.lookup_hit_blocks;
    row.offloaded_blocks = c.offloaded_blocks;
    row.demoted_blocks = c.demoted_blocks;
    row.bytes_read = st.bytes_read;
    row.bytes_written = st.bytes_written;
    row.failed_loads = c.failed_loads;
    row.corrupt_records = st.corrupt_records;
    row.faults = st.faults;
    out.tiers.push_back(std::move(row));
  }
  out.tier_loads_in_flight = tiers.num_loads_in_flight();
}

std::vector<CachedPrefix> largest_prefixes(const kvcache::BlockManager& bm, const KvHistory* history,
                                           const model::Tokenizer* tokenizer, int64_t now_ns, int max_prefixes,
                                           int preview_tokens) {
  const kvcache::PrefixIndex& index = bm.index();
  const int32_t num_blocks = static_cast<int32_t>(bm.pool().num_blocks());
  // depth[b]: blocks from the root to b inclusive (0: not registered). Parents may have higher
  // ids than children, so depths are filled by walking up with memoisation.
  std::vector<int32_t> depth(static_cast<size_t>(num_blocks), 0);
  std::vector<int32_t> path;
  for (int32_t b = 0; b < num_blocks; ++b) {
    if (!index.contains(b) || depth[b] > 0) continue;
    path.clear();
    int32_t at = b;
    while (at != kvcache::PrefixIndex::kRoot && depth[at] == 0) {
      path.push_back(at);
      at = index.parent(at);
    }
    int32_t d = at == kvcache::PrefixIndex::kRoot ? 0 : depth[at];
    for (auto it = path.rbegin(); it != path.rend(); ++it) depth[*it] = ++d;
  }
  std::vector<int32_t> leaves;
  for (int32_t b = 0; b < num_blocks; ++b) {
    if (index.contains(b) && index.num_children(b) == 0) leaves.push_back(b);
  }
  auto hits = [&](int32_t b) { return static_cast<int64_t>(bm.usage(b).num_accesses); };
  std::sort(leaves.begin(), leaves.end(), [&](int32_t a, int32_t b) {
    if (depth[a] != depth[b]) return depth[a] > depth[b];
    if (hits(a) != hits(b)) return hits(a) > hits(b);
    return a < b;
  });
  if (static_cast<int>(leaves.size()) > max_prefixes) leaves.resize(static_cast<size_t>(std::max(0, max_prefixes)));
  const int64_t B = bm.pool().layout().block_size;
  std::vector<CachedPrefix> out;
  for (int32_t leaf : leaves) {
    CachedPrefix p;
    p.num_blocks = depth[leaf];
    p.num_tokens = p.num_blocks * B;
    p.hits = hits(leaf);
    p.in_use = bm.pool().state(leaf) == kvcache::BlockState::kInUse;
    if (history != nullptr) {
      if (std::optional<int64_t> at = history->time_of_tick(bm.usage(leaf).last_access)) {
        p.last_use_age_s = std::max(0.0, static_cast<double>(now_ns - *at) * 1e-9);
      }
    }
    if (tokenizer != nullptr && preview_tokens > 0) {
      path.clear();
      for (int32_t at = leaf; at != kvcache::PrefixIndex::kRoot; at = index.parent(at)) path.push_back(at);
      std::vector<int32_t> tokens;
      for (auto it = path.rbegin(); it != path.rend() && static_cast<int>(tokens.size()) < preview_tokens; ++it) {
        for (int32_t t : index.tokens(*it)) {
          if (static_cast<int>(tokens.size()) == preview_tokens) break;
          if (t >= 0 && t < tokenizer->vocab_size()) tokens.push_back(t);
        }
      }
      p.preview = tokenizer->decode(tokens);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace pagoda::engine
