#include "sim/cache_replay.h"

#include <sched.h>

#include <algorithm>
#include <optional>

#include "core/log.h"
#include "kvcache/block_manager.h"
#include "kvcache/block_pool.h"
#include "kvcache/block_record.h"
#include "kvcache/disk_tier.h"
#include "kvcache/host_tier.h"
#include "kvcache/tier_stack.h"
#include "sim/shared_pool.h"

namespace pagoda::sim {

namespace {

// The whole blocks after seq's pool hit that the tiers hold, loaded into fresh pool blocks as
// Engine::load_from_tiers does (blocking: one request at a time), always loading. Adds the
// tokens loaded from each tier to hit_by_tier; returns them all.
int64_t load_from_tiers(kvcache::BlockManager& bm, kvcache::TierStack& stack, kvcache::SeqId seq,
                        std::span<const int32_t> prompt, const kvcache::KvNamespace& ns, std::vector<int64_t>& hit_by_tier) {
  const int64_t bs = bm.pool().layout().block_size;
  const int64_t cached = bm.length(seq);
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / bs;
  if (cached / bs >= max_blocks) return 0;
  const kvcache::BlockHash parent =
      cached > 0 ? bm.index().hash(bm.block_table(seq)[static_cast<size_t>(cached / bs - 1)]) : kvcache::kRootBlockHash;
  const std::span<const int32_t> rest = prompt.subspan(static_cast<size_t>(cached), static_cast<size_t>(max_blocks * bs - cached));
  std::vector<kvcache::BlockHash> chain;
  kvcache::chain_hashes(bm.hash_fn(), parent, rest, bs, ns.key(), chain);
  const kvcache::ProbeId probe = stack.probe(chain);
  std::optional<std::vector<kvcache::TierRun>> runs;
  while (!(runs = stack.take_probe(probe))) {
    sched_yield();
    stack.poll();
  }
  int64_t n_load = 0;
  for (const kvcache::TierRun& r : *runs) n_load += r.count;
  if (n_load == 0 || !bm.begin_load(seq, rest.first(static_cast<size_t>(n_load * bs)))) return 0;
  const std::span<const int32_t> pool_blocks = bm.loading_blocks(seq);
  std::vector<kvcache::LoadItem> items;
  for (const kvcache::TierRun& r : *runs) {
    for (int64_t k = r.begin; k < r.begin + r.count; ++k) {
      items.push_back({pool_blocks[items.size()], chain[static_cast<size_t>(k)], r.tier});
    }
  }
  const kvcache::LoadId load = stack.load(ns, items);
  std::optional<kvcache::LoadResult> result;
  while (!(result = stack.take_load(load))) {
    sched_yield();
    stack.poll();
  }
  const int64_t confirmed = bm.finish_load(seq, result->num_ok, result->tokens);
  for (int64_t i = 0; i < confirmed; ++i) hit_by_tier[static_cast<size_t>(items[static_cast<size_t>(i)].tier)] += bs;
  return confirmed * bs;
}

}  // namespace

int64_t unbounded_capacity_blocks(const std::vector<TraceRequest>& trace, int64_t block_size) {
  int64_t blocks = 0;
  for (const TraceRequest& r : trace) blocks += (r.input_length + block_size - 1) / block_size;
  return blocks;
}

Result<CacheReplayResult> replay_cache(const std::vector<TraceRequest>& trace, const CacheReplayOptions& o) {
  if (o.block_size <= 0 || o.block_size > 4096) return Status::invalid_argument("block size must be in [1, 4096]");
  if (o.capacity_tokens < 0) return Status::invalid_argument("negative cache capacity");
  CacheReplayResult res;
  res.capacity_blocks = o.capacity_tokens > 0 ? o.capacity_tokens / o.block_size
                                              : std::max<int64_t>(1, unbounded_capacity_blocks(trace, o.block_size));
  if (res.capacity_blocks < 1) {
    return Status::invalid_argument("a cache of " + std::to_string(o.capacity_tokens) + " tokens holds no block of " +
                                    std::to_string(o.block_size));
  }
  if (o.host_tokens < 0 || o.disk_tokens < 0 || o.remote_tokens < 0) return Status::invalid_argument("negative tier capacity");
  if (o.disk_tokens > 0 && o.disk_dir.empty()) return Status::invalid_argument("a disk tier needs a directory");
  if (o.remote_tokens > 0 && o.remote_tokens < o.block_size) {
    return Status::invalid_argument("a remote tier of " + std::to_string(o.remote_tokens) + " tokens holds no block of " +
                                    std::to_string(o.block_size));
  }
  const bool tiered = o.host_tokens > 0 || o.disk_tokens > 0 || o.remote_tokens > 0;
  if (tiered && o.clock == nullptr) return Status::invalid_argument("tiers need a clock");
  if (tiered && o.capacity_tokens == 0) {
    return Status::invalid_argument("tiers below an unbounded pool would never be used: give the pool a capacity");
  }
  // A stand-in geometry (see the top): with tiers its bytes are real and small, without them
  // the pool holds none.
  kvcache::KvLayout layout;
  layout.n_layer = 1;
  layout.n_kv_head = 1;
  layout.head_dim = 2;
  layout.dtype = kernels::KvDType::kF16;
  layout.block_size = o.block_size;
  PAGODA_ASSIGN_OR_RETURN(kvcache::BlockPool pool, tiered ? kvcache::BlockPool::create(layout, res.capacity_blocks)
                                                          : kvcache::BlockPool::create_without_memory(layout, res.capacity_blocks));
  kvcache::BlockManagerOptions bm_options;
  bm_options.eviction = o.eviction;
  kvcache::BlockManager bm(pool, bm_options);
  const kvcache::KvNamespace ns;  // one model, one tenant
  const Logger quiet(LogLevel::kSilent);
  std::unique_ptr<SharedPool> remote;  // outlives the stack, which holds its client
  std::unique_ptr<kvcache::TierStack> stack;
  std::vector<int64_t> hit_by_tier;
  if (tiered) {
    stack = std::make_unique<kvcache::TierStack>(pool, kvcache::OffloadMode::kWriteBack, *o.clock, quiet);
    const int64_t record = kvcache::record_bytes(kvcache::record_meta_for(layout));
    if (o.host_tokens > 0) {
      kvcache::HostTierOptions ho;
      ho.layout = layout;
      ho.eviction = o.eviction;
      const int64_t slot = (record + kvcache::kRecordAlign - 1) / kvcache::kRecordAlign * kvcache::kRecordAlign;
      ho.capacity_bytes = std::max<int64_t>(1, o.host_tokens / o.block_size) * slot;
      PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<kvcache::HostTier> host, kvcache::HostTier::create(ho, *o.clock));
      res.tiers.push_back({"host", host->num_slots()});
      stack->add_tier(std::move(host));
    }
    if (o.disk_tokens > 0) {
      kvcache::DiskTierOptions d;
      d.dir = o.disk_dir;
      d.layout = layout;
      d.eviction = o.eviction;
      const int64_t slot = (record + 4095) / 4096 * 4096;  // disk_tier.h: records in 4 KiB slots
      d.capacity_bytes = std::max<int64_t>(1, o.disk_tokens / o.block_size) * slot;
      auto disk = kvcache::DiskTier::create(d, *o.clock, quiet);
      if (!disk.is_ok()) return disk.status().with_context("disk tier in " + o.disk_dir);
      res.tiers.push_back({"disk", d.capacity_bytes / slot});
      stack->add_tier(std::move(disk).value());
    }
    if (o.remote_tokens > 0) {
      PAGODA_ASSIGN_OR_RETURN(remote, SharedPool::create(layout, o.remote_tokens / o.block_size, o.eviction, *o.clock, "remote"));
      res.tiers.push_back({"remote", remote->capacity_blocks()});
      stack->add_tier(remote->client());
    }
    bm.add_listener(stack.get());
    hit_by_tier.assign(res.tiers.size(), 0);
  }

  std::vector<int32_t> tokens;
  std::vector<int64_t> slots;
  std::vector<kvcache::BlockCopy> copies;
  for (const TraceRequest& r : trace) {
    ++res.requests;
    res.prompt_tokens += r.input_length;
    synthesize_prompt(r, o.trace, tokens);
    kvcache::PrefixMatch hit = bm.match_prefix(tokens, ns);
    if (!bm.plan(hit, r.input_length).fits()) {
      ++res.rejected;
      continue;
    }
    const int64_t pool_hit = hit.num_tokens();
    const kvcache::SeqId seq = bm.add_sequence(r.input_length);
    bm.adopt(seq, std::move(hit));
    if (stack != nullptr) {
      load_from_tiers(bm, *stack, seq, tokens, ns, hit_by_tier);
      if (bm.plan(seq, r.input_length - bm.length(seq)).fits() == false) {  // the loaded blocks took the room
        bm.free_sequence(seq);
        ++res.rejected;
        continue;
      }
    }
    const int64_t cached = bm.length(seq);
    res.pool_hit_tokens += pool_hit;
    const int64_t n_new = r.input_length - cached;
    slots.resize(static_cast<size_t>(n_new));
    copies.clear();
    const bool appended = bm.append(seq, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(cached)), slots, copies);
    CHECK(appended) << "a planned prompt did not fit";  // plan() said it fits
    bm.commit(seq);
    res.hit_tokens += cached;
    res.peak_blocks_held = std::max(res.peak_blocks_held, pool.num_blocks() - pool.num_free());
    bm.free_sequence(seq);
    if (stack != nullptr) stack->poll();
  }
  if (stack != nullptr) {
    while (stack->has_pending_work()) {
      sched_yield();
      stack->poll();
    }
    const int64_t block_bytes = o.kv_bytes_per_token * o.block_size;
    for (size_t t = 0; t < res.tiers.size(); ++t) {
      const kvcache::TierCounters& c = stack->counters(static_cast<int>(t));
      TierReplayStats& ts = res.tiers[t];
      ts.hit_tokens = hit_by_tier[t];
      ts.stored_blocks = c.offloaded_blocks + c.demoted_blocks;
      ts.loaded_blocks = c.loaded_blocks;
      ts.dropped_writes = c.dropped_writes;
      ts.bytes_in = ts.stored_blocks * block_bytes;
      ts.bytes_out = ts.loaded_blocks * block_bytes;
    }
    bm.remove_listener(stack.get());
  }
  res.hit_rate = res.prompt_tokens > 0 ? static_cast<double>(res.hit_tokens) / static_cast<double>(res.prompt_tokens) : 0;
  res.evictions = bm.stats().num_evictions;
  res.blocks_allocated = bm.stats().num_blocks_allocated;
  return res;
}

}  // namespace pagoda::sim
