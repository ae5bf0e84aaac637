// libpagoda_kv.so, ABI 1.1: tiers below the pool (include/pagoda/kv_cache.h "Tiers") over
// kvcache::TierStack with the host DRAM and SSD tiers. The C API has no step loop, so the calls
// that need a tier's answer (locate, load) wait for it here: first for every put in flight (a
// block offloaded a moment ago must be found), then for the probe and the reads they start.
#include <sched.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "capi/kv_cache_internal.h"
#include "kvcache/disk_tier.h"
#include "kvcache/host_tier.h"

namespace pagoda::capi {

void settle_tiers(pagoda_kv_cache* cache) {
  if (cache->tiers == nullptr) return;
  cache->tiers->poll();
  while (cache->tiers->num_puts_in_flight() > 0) {
    sched_yield();
    cache->tiers->poll();
  }
}

namespace {

Result<std::unique_ptr<kvcache::Tier>> make_tier(pagoda_kv_cache* cache, const pagoda_kv_tier_config& c) {
  if (c.capacity_bytes <= 0) return Status::invalid_argument("tier capacity_bytes must be > 0");
  if (c.kind == PAGODA_KV_TIER_HOST) {
    kvcache::HostTierOptions o;
    o.capacity_bytes = c.capacity_bytes;
    o.layout = cache->pool->layout();
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<kvcache::HostTier> host, kvcache::HostTier::create(o, cache->clock));
    return std::unique_ptr<kvcache::Tier>(std::move(host));
  }
  if (c.kind == PAGODA_KV_TIER_DISK) {
    if (c.dir == nullptr || c.dir[0] == '\0') return Status::invalid_argument("a disk tier needs dir (a directory)");
    kvcache::DiskTierOptions o;
    o.dir = c.dir;
    o.capacity_bytes = c.capacity_bytes;
    o.layout = cache->pool->layout();
    o.model_fingerprint = c.model_fingerprint;
    o.kv_format = c.kv_format;
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<kvcache::DiskTier> disk, kvcache::DiskTier::create(o, cache->clock, cache->logger));
    return std::unique_ptr<kvcache::Tier>(std::move(disk));
  }
  return Status::invalid_argument("unknown tier kind " + std::to_string(c.kind));
}

pagoda_kv_status check_tier(pagoda_kv_cache* cache, int32_t tier) {
  const int32_t n = cache->tiers == nullptr ? 0 : cache->tiers->num_tiers();
  if (tier < 0 || tier >= n) return invalid("tier " + std::to_string(tier) + " outside [0, " + std::to_string(n) + ")");
  return PAGODA_KV_OK;
}

// Waits for a probe of `chain` and returns its runs.
std::vector<kvcache::TierRun> probe_now(kvcache::TierStack& tiers, std::span<const kvcache::BlockHash> chain) {
  const kvcache::ProbeId probe = tiers.probe(chain);
  std::optional<std::vector<kvcache::TierRun>> runs;
  while (!(runs = tiers.take_probe(probe))) {
    sched_yield();
    tiers.poll();
  }
  return std::move(*runs);
}

}  // namespace
}  // namespace pagoda::capi

using pagoda::capi::fail;
using pagoda::capi::find_seq;
using pagoda::capi::guarded;
using pagoda::capi::invalid;

extern "C" {

pagoda_kv_status pagoda_kv_tier_attach(pagoda_kv_cache* cache, const pagoda_kv_tier_config* config, int32_t* tier_index) {
  return guarded(cache, [&] {
    if (config == nullptr) return invalid("config must not be NULL");
    if (config->struct_size < sizeof(pagoda_kv_tier_config)) {
      return fail(PAGODA_KV_ABI_MISMATCH, "tier config.struct_size must be sizeof(pagoda_kv_tier_config)");
    }
    if (cache->tiers != nullptr && cache->tiers->num_tiers() >= pagoda::kvcache::kMaxTiers) {
      return invalid("at most " + std::to_string(pagoda::kvcache::kMaxTiers) + " tiers");
    }
    auto tier = pagoda::capi::make_tier(cache, *config);
    if (!tier.is_ok()) return invalid(tier.status().message());
    if (cache->tiers == nullptr) {
      cache->tiers = std::make_unique<pagoda::kvcache::TierStack>(*cache->pool, pagoda::kvcache::OffloadMode::kWriteBack,
                                                                  cache->clock, cache->logger);
      cache->manager->add_listener(cache->tiers.get());
    }
    cache->tiers->add_tier(std::move(tier).value(), config->write_through != 0);
    if (tier_index != nullptr) *tier_index = cache->tiers->num_tiers() - 1;
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_num_tiers(pagoda_kv_cache* cache, int32_t* num_tiers) {
  return guarded(cache, [&] {
    if (num_tiers == nullptr) return invalid("num_tiers must not be NULL");
    *num_tiers = cache->tiers == nullptr ? 0 : cache->tiers->num_tiers();
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_get_tier_stats(pagoda_kv_cache* cache, int32_t tier, pagoda_kv_tier_stats* out) {
  return guarded(cache, [&] {
    if (out == nullptr || out->struct_size < sizeof(pagoda_kv_tier_stats)) {
      return fail(PAGODA_KV_ABI_MISMATCH, "tier stats.struct_size must be sizeof(pagoda_kv_tier_stats)");
    }
    if (pagoda_kv_status s = pagoda::capi::check_tier(cache, tier); s != PAGODA_KV_OK) return s;
    pagoda::capi::settle_tiers(cache);
    const pagoda::kvcache::Tier& t = cache->tiers->tier(tier);
    const pagoda::kvcache::TierStats st = t.stats();
    const pagoda::kvcache::TierCounters& c = cache->tiers->counters(tier);
    const uint32_t size = out->struct_size;
    std::memset(out, 0, sizeof(pagoda_kv_tier_stats));
    out->struct_size = size;
    const std::string_view name = t.name();
    std::memcpy(out->name, name.data(), std::min(name.size(), sizeof(out->name) - 1));
    out->enabled = t.enabled() ? 1 : 0;
    out->capacity_blocks = st.capacity_blocks;
    out->used_blocks = st.used_blocks;
    out->lookups = st.lookups;
    out->lookup_hit_blocks = st.lookup_hit_blocks;
    out->offloaded_blocks = c.offloaded_blocks;
    out->demoted_blocks = c.demoted_blocks;
    out->loaded_blocks = c.loaded_blocks;
    out->failed_loads = c.failed_loads;
    out->bytes_written = st.bytes_written;
    out->bytes_read = st.bytes_read;
    out->evictions = st.evictions;
    out->corrupt_records = st.corrupt_records;
    out->faults = st.faults;
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_evict_cached(pagoda_kv_cache* cache, int64_t* num_blocks) {
  return guarded(cache, [&] {
    const int64_t n = cache->manager->evict_all_cached();
    pagoda::capi::settle_tiers(cache);
    if (num_blocks != nullptr) *num_blocks = n;
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_locate(pagoda_kv_cache* cache, const int32_t* tokens, size_t n, const pagoda_kv_namespace* ns,
                                  int32_t* where_out, size_t capacity, size_t* num_blocks) {
  return guarded(cache, [&] {
    if ((tokens == nullptr && n > 0) || num_blocks == nullptr || (where_out == nullptr && capacity > 0)) {
      return invalid("tokens, num_blocks (and where_out) must not be NULL");
    }
    const pagoda::kvcache::BlockManager& bm = *cache->manager;
    const pagoda::kvcache::KvNamespace want = pagoda::capi::to_ns(ns);
    const int64_t bs = cache->pool->layout().block_size;
    const std::span<const int32_t> prompt(tokens, n);
    const int64_t max_blocks = n > 0 ? (static_cast<int64_t>(n) - 1) / bs : 0;
    std::vector<int32_t> chain;
    int64_t hit = bm.index().match(prompt, want, max_blocks, bm.hash_fn(), chain);
    std::vector<int32_t> where(static_cast<size_t>(hit), 0);
    if (cache->tiers != nullptr && hit < max_blocks) {
      pagoda::capi::settle_tiers(cache);
      std::vector<pagoda::kvcache::BlockHash> hashes;
      pagoda::kvcache::chain_hashes(bm.hash_fn(), pagoda::kvcache::kRootBlockHash,
                                    prompt.first(static_cast<size_t>(max_blocks * bs)), bs, want.key(), hashes);
      for (; hit < max_blocks; ++hit) {
        const uint32_t holders = cache->tiers->holders_now(hashes[static_cast<size_t>(hit)]);
        if (holders == 0) break;
        where.push_back(1 + std::countr_zero(holders));
      }
    }
    *num_blocks = where.size();
    std::copy_n(where.begin(), std::min(capacity, where.size()), where_out);
    return PAGODA_KV_OK;
  });
}

pagoda_kv_status pagoda_kv_seq_load(pagoda_kv_cache* cache, pagoda_kv_seq seq, const int32_t* tokens, size_t n,
                                    int64_t* loaded_tokens) {
  return guarded(cache, [&] {
    if (pagoda_kv_status s = find_seq(cache, seq); s != PAGODA_KV_OK) return s;
    if (tokens == nullptr && n > 0) return invalid("tokens must not be NULL");
    if (loaded_tokens != nullptr) *loaded_tokens = 0;
    pagoda::kvcache::BlockManager& bm = *cache->manager;
    if (!bm.loadable(seq)) {
      return invalid("load into a sequence with uncommitted tokens or a partial last block: commit first");
    }
    const int64_t bs = cache->pool->layout().block_size;
    const int64_t length = bm.length(seq);
    const int64_t max_blocks = n > 0 ? (static_cast<int64_t>(n) - 1) / bs : 0;
    if (static_cast<int64_t>(n) < length) return invalid("tokens are shorter than the sequence");
    const pagoda::kvcache::KvNamespace& ns = cache->seqs[seq].ns;
    const std::span<const int32_t> prompt(tokens, n);
    std::vector<pagoda::kvcache::BlockHash> chain;
    pagoda::kvcache::chain_hashes(bm.hash_fn(), pagoda::kvcache::kRootBlockHash, prompt.first(static_cast<size_t>(length)),
                                  bs, ns.key(), chain);
    if ((chain.empty() ? pagoda::kvcache::kRootBlockHash : chain.back()) != bm.last_block_hash(seq)) {
      return invalid("tokens[0, length) are not the sequence's tokens");
    }
    if (cache->tiers == nullptr || length / bs >= max_blocks) return PAGODA_KV_OK;
    pagoda::kvcache::TierStack& tiers = *cache->tiers;
    pagoda::capi::settle_tiers(cache);
    const std::span<const int32_t> rest = prompt.subspan(static_cast<size_t>(length), static_cast<size_t>(max_blocks * bs - length));
    chain.clear();
    pagoda::kvcache::chain_hashes(bm.hash_fn(), bm.last_block_hash(seq), rest, bs, ns.key(), chain);
    const std::vector<pagoda::kvcache::TierRun> runs = pagoda::capi::probe_now(tiers, chain);
    int64_t n_blocks = 0;
    for (const pagoda::kvcache::TierRun& r : runs) n_blocks += r.count;
    if (n_blocks == 0 || !bm.begin_load(seq, rest.first(static_cast<size_t>(n_blocks * bs)))) return PAGODA_KV_OK;
    const std::span<const int32_t> pool_blocks = bm.loading_blocks(seq);
    std::vector<pagoda::kvcache::LoadItem> items;
    for (const pagoda::kvcache::TierRun& r : runs) {
      for (int64_t k = r.begin; k < r.begin + r.count; ++k) {
        items.push_back({pool_blocks[items.size()], chain[static_cast<size_t>(k)], r.tier});
      }
    }
    const pagoda::kvcache::LoadId load = tiers.load(ns, items);
    std::optional<pagoda::kvcache::LoadResult> result;
    while (!(result = tiers.take_load(load))) {  // the destinations stay untouched until then
      sched_yield();
      tiers.poll();
    }
    const int64_t confirmed = bm.finish_load(seq, result->num_ok, result->tokens);
    if (loaded_tokens != nullptr) *loaded_tokens = confirmed * bs;
    return PAGODA_KV_OK;
  });
}

}  // extern "C"
