#include "sim/cache_replay.h"

#include <algorithm>

#include "kvcache/block_manager.h"
#include "kvcache/block_pool.h"

namespace pagoda::sim {

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
  // The geometry of one block is irrelevant without memory; the layout only has to be valid.
  kvcache::KvLayout layout;
  layout.n_layer = 1;
  layout.n_kv_head = 1;
  layout.head_dim = 8;
  layout.block_size = o.block_size;
  PAGODA_ASSIGN_OR_RETURN(kvcache::BlockPool pool, kvcache::BlockPool::create_without_memory(layout, res.capacity_blocks));
  kvcache::BlockManagerOptions bm_options;
  bm_options.eviction = o.eviction;
  kvcache::BlockManager bm(pool, bm_options);
  const kvcache::KvNamespace ns;  // one model, one tenant

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
    const int64_t cached = hit.num_tokens();
    const kvcache::SeqId seq = bm.add_sequence(r.input_length);
    bm.adopt(seq, std::move(hit));
    const int64_t n_new = r.input_length - cached;
    slots.resize(static_cast<size_t>(n_new));
    copies.clear();
    const bool appended = bm.append(seq, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(cached)), slots, copies);
    CHECK(appended) << "a planned prompt did not fit";  // plan() said it fits
    bm.commit(seq);
    res.hit_tokens += cached;
    res.peak_blocks_held = std::max(res.peak_blocks_held, pool.num_blocks() - pool.num_free());
    bm.free_sequence(seq);
  }
  res.hit_rate = res.prompt_tokens > 0 ? static_cast<double>(res.hit_tokens) / static_cast<double>(res.prompt_tokens) : 0;
  res.evictions = bm.stats().num_evictions;
  res.blocks_allocated = bm.stats().num_blocks_allocated;
  return res;
}

}  // namespace pagoda::sim
