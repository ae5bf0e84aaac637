// Cache mode of trace replay (`pagoda replay`): a trace's prompts, in arrival order, through
// Pagoda's own BlockManager (prefix index, chained block hashes, eviction policy) over a pool
// that holds block states but no KV bytes (BlockPool::create_without_memory). No model, no
// clock: the answer is what a cache of a given size would have served.
//
// Per request, as the engine admits a prompt: match_prefix (the longest cached run of full
// blocks, never the last token) -> plan -> add_sequence + adopt -> append the rest -> commit
// -> free_sequence (its full blocks stay cached, evictable by the policy). A prompt larger than
// the whole pool cannot be admitted: counted as rejected, its tokens still count as prompt
// tokens (missed). Generated tokens are not replayed here (the trace has no ids for them; a
// follow-up turn's hash_ids already carry what it shares).
//
//   hit_rate         = hit_tokens / prompt_tokens
//   ceiling_hit_rate = the same with a pool that never evicts (every block of the trace fits)
//   peak_blocks_held = the most blocks in use or cached at once
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kvcache/eviction.h"
#include "sim/trace.h"

namespace pagoda::sim {

struct CacheReplayOptions {
  int64_t block_size = 16;         // Pagoda's block (tokens)
  int64_t capacity_tokens = 0;     // the pool; 0: unbounded (the ceiling)
  kvcache::EvictionPolicyKind eviction = kvcache::EvictionPolicyKind::kLru;
  TraceOptions trace;
};

struct CacheReplayResult {
  int64_t requests = 0;
  int64_t rejected = 0;            // prompts larger than the pool
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;
  double hit_rate = 0;
  int64_t capacity_blocks = 0;
  int64_t evictions = 0;
  int64_t blocks_allocated = 0;
  int64_t peak_blocks_held = 0;
};

// Every block the trace's prompts would occupy if none were shared: the capacity at which
// nothing is ever evicted.
int64_t unbounded_capacity_blocks(const std::vector<TraceRequest>& trace, int64_t block_size);

Result<CacheReplayResult> replay_cache(const std::vector<TraceRequest>& trace, const CacheReplayOptions& options);

}  // namespace pagoda::sim
