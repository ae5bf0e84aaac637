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
//   hit_rate         = hit_tokens / prompt_tokens (pool and tiers together)
//   ceiling_hit_rate = the same with a pool that never evicts (every block of the trace fits)
//   peak_blocks_held = the most pool blocks in use or cached at once
//
// Tiers (host_tokens / disk_tokens / remote_tokens > 0): the real kvcache::TierStack below the
// pool, write-back (a block the pool evicts goes to the host tier, one the host tier evicts to
// the disk tier, and so on down; the bottom tier drops what it evicts). The remote tier has a
// Redis tier's semantics (sim/shared_pool.h: a store every instance could share, LRU, the
// bottom), here below one instance's host and disk tiers; and after each pool hit the rest of the prompt's chain is probed in
// the tiers and loaded as Engine::load_from_tiers does (always load, no cost model). The pool
// then has KV memory, of a stand-in geometry of 128 bytes a block (1 layer, 1 head of 2 f16
// values, 16 tokens; more for larger blocks): records are real, small, and checked on every
// load. Blocks moved are counted; bytes moved are blocks x the bytes of a block of the model
// being sized (kv_bytes_per_token x block_size, 0: unknown).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "kvcache/eviction.h"
#include "sim/trace.h"

namespace pagoda::sim {

struct CacheReplayOptions {
  int64_t block_size = 16;         // Pagoda's block (tokens)
  int64_t capacity_tokens = 0;     // the pool; 0: unbounded (the ceiling)
  int64_t host_tokens = 0;         // a host DRAM tier below the pool (0: none)
  int64_t disk_tokens = 0;         // an SSD tier below it, in disk_dir (0: none)
  int64_t remote_tokens = 0;       // a remote (Redis-like) tier at the bottom (0: none)
  std::string disk_dir;
  int64_t kv_bytes_per_token = 0;  // of the model being sized: bytes moved (0: not reported)
  const Clock* clock = nullptr;    // the tiers' completion times (required with tiers)
  kvcache::EvictionPolicyKind eviction = kvcache::EvictionPolicyKind::kLru;
  TraceOptions trace;
};

struct TierReplayStats {
  std::string name;                // "host", "disk", "remote"
  int64_t capacity_blocks = 0;
  int64_t hit_tokens = 0;          // prompt tokens loaded from this tier
  int64_t stored_blocks = 0;       // put into it (pool evictions for the first, demotions below)
  int64_t loaded_blocks = 0;
  int64_t dropped_writes = 0;
  int64_t bytes_in = 0, bytes_out = 0;  // stored / loaded blocks x the model's block bytes
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
  int64_t pool_hit_tokens = 0;     // of hit_tokens, served by the pool itself
  std::vector<TierReplayStats> tiers;
};

// Every block the trace's prompts would occupy if none were shared: the capacity at which
// nothing is ever evicted.
int64_t unbounded_capacity_blocks(const std::vector<TraceRequest>& trace, int64_t block_size);

Result<CacheReplayResult> replay_cache(const std::vector<TraceRequest>& trace, const CacheReplayOptions& options);

}  // namespace pagoda::sim
