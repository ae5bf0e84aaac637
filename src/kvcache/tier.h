// Tier: one level of KV storage below the block pool (host DRAM, SSD, a remote pool on Redis),
// named by chained block hash and moving BlockRecords (kvcache/block_record.h). The engine's
// tier stack drives several tiers, fastest first; the step loop never waits on one.
//
// Tier policy (every tier and the stack that drives them agree on it):
//   - Write-back on eviction (default): when the pool evicts a cached block, its record is put
//     into the first tier. `--kv-offload write-through` instead puts every committed full block
//     at once. A tier that must make room evicts by its own policy (LRU, with the pool's priority
//     rules) and hands each victim to its eviction callback, which the stack uses to demote it to
//     the next tier down (host -> disk -> remote); the bottom tier drops it.
//   - Promotion on a hit: admission matches the longest prefix across the pool and the tiers,
//     block by block in chain order (pool, then each tier fastest first); blocks found in a tier
//     are loaded into freshly allocated pool blocks and registered in the prefix index. Tiers
//     are inclusive: a promoted block keeps its copy in the tier, so a later eviction of it is a
//     cheap no-op put (a put of a hash the tier holds only refreshes its recency).
//   - Ownership of bytes in flight: put() copies everything it needs (record meta, tokens,
//     payload) before it returns, so the caller may reuse or free the source at once. get()
//     writes into caller-owned destinations (a pool block held by the caller, unreadable by any
//     sequence) that must stay valid and untouched until the op's completion has been polled;
//     the tier keeps the source entry from being evicted or overwritten until then.
//   - Verification: get() decodes and verifies every record (checksum, sizes) and checks it with
//     check_block_record against the expected hash, namespace and layout before a single byte is
//     copied into the destination; a record that fails is dropped from the tier and counted in
//     corrupt_records. The caller then confirms the token ids (a hash proposes, tokens decide).
//
// Asynchrony. lookup/put/get return a TierOpId at once; the op's one TierCompletion comes out of
// a later poll() (an op may finish during submit; it is still reported by poll). poll() never
// blocks. Ops over a chain report how many items from the first succeeded (num_ok): after the
// first failure nothing later in the chain is usable.
//
// Threads: a Tier is driven from one thread (the engine's step thread); implementations may run
// I/O threads of their own. Faults (a full or failing disk, a dead Redis) are never errors of
// the caller: ops fail (num_ok short, status says why), counters count, and a tier that cannot
// go on reports enabled() == false and answers every op at once as a miss.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kvcache/block_record.h"

namespace pagoda::kvcache {

using TierOpId = uint64_t;
enum class TierOpKind : uint8_t { kLookup, kPut, kGet };

struct TierPut {
  BlockRecordMeta meta;               // hash, parent hash, namespace, shape, format
  std::span<const int32_t> tokens;    // [block_size]
  std::span<const ConstByteSpan> payload;  // gathered in order (BlockPool::block_segments)
  int32_t priority = 0;               // eviction priority (higher kept longer)
};

struct TierGet {
  BlockHash hash = 0;                 // the block wanted; its record must say so
  KvNamespace ns;                     // expected namespace
  std::span<const ByteSpan> dest;     // [2 x n_layer] pool block segments, caller-owned
  std::span<int32_t> tokens_out;      // [block_size] the record's token ids, caller-owned
};

struct TierCompletion {
  TierOpId op = 0;
  TierOpKind kind = TierOpKind::kLookup;
  int64_t num_items = 0;              // hashes / blocks submitted
  int64_t num_ok = 0;                 // lookup: consecutive hashes held from the first;
                                      // put/get: consecutive items done from the first
  Status status;                      // why an item failed (ok when num_ok == num_items or a miss)
  int64_t submit_ns = 0, complete_ns = 0;  // for latency histograms
  int64_t bytes = 0;                  // bytes moved by the items that succeeded
};

struct TierStats {
  int64_t capacity_blocks = 0;
  int64_t used_blocks = 0;
  int64_t lookups = 0, lookup_hit_blocks = 0;
  int64_t puts = 0, put_blocks = 0, put_failures = 0;
  int64_t gets = 0, get_blocks = 0, get_failures = 0;
  int64_t bytes_written = 0, bytes_read = 0;
  int64_t evictions = 0;              // entries dropped to make room (handed to the callback)
  int64_t corrupt_records = 0;        // failed decode/checksum/check: dropped, never used
  int64_t faults = 0;                 // I/O or connection errors
};

// Called synchronously from inside put() (or poll()) with a victim the tier is evicting; the
// record's spans are valid only during the call (a demotion target copies them in its put).
using TierEvictionCallback = std::function<void(const BlockRecordView& record, int32_t priority)>;
// Called synchronously, from inside whichever op (or poll) does it, with each hash a tier stops
// holding: evicted (demoted or not), erased, dropped as corrupt. The tier stack turns these
// into KV events (BlockRemoved with the tier's medium). Must not call back into the tier.
using TierRemovedCallback = std::function<void(BlockHash hash)>;

// Blocks a tier held before this process put anything into it: the disk tier's persisted
// records adopted at start-up. The stack announces them as KV events (BlockStored) once a
// listener is set, so a router learns what a restarted worker still has.
struct FoundBlock {
  BlockHash hash = 0;
  BlockHash parent_hash = kRootBlockHash;
  KvNamespace ns;
};
struct FoundBlocks {
  int64_t block_size = 0;
  std::vector<FoundBlock> blocks;
  std::vector<int32_t> tokens;  // [blocks x block_size]: block i's token ids at i x block_size
};

// A transfer a tier timed itself: a start-up probe that moved a block-sized payload (the disk
// tier reads one slot back; the Redis tier SETs and GETs one record's bytes). It gives the
// load-cost model this machine's figure before any get was measured (engine/load_cost.h).
struct TransferSample {
  int64_t bytes = 0;  // 0: none
  int64_t ns = 0;
};

class Tier {
 public:
  virtual ~Tier() = default;
  virtual std::string_view name() const = 0;    // "host", "disk", "redis": the `tier` label
  virtual std::string_view medium() const = 0;  // KV events' medium: "CPU", "DISK", "REDIS"
  // What holds the records, for people (the dashboard, /v1/kv/stats): "host DRAM", "disk", "Redis".
  // The events keep vLLM's medium names on the wire; this names the hardware that is there.
  virtual std::string_view memory() const { return medium(); }
  virtual bool enabled() const = 0;             // false after a fault it cannot recover from
  virtual std::string disabled_reason() const { return {}; }

  // How many hashes of `chain` (consecutive blocks, root first) this tier holds from the first.
  virtual TierOpId lookup(std::span<const BlockHash> chain) = 0;
  virtual TierOpId put(std::span<const TierPut> blocks) = 0;
  // A chain of blocks, root first (tiers may coalesce their reads).
  virtual TierOpId get(std::span<const TierGet> blocks) = 0;
  // Drops entries now (no completion).
  virtual void erase(std::span<const BlockHash> hashes) = 0;
  // Appends the completions of finished ops; never blocks.
  virtual void poll(std::vector<TierCompletion>& out) = 0;

  virtual TierStats stats() const = 0;
  virtual void set_eviction_callback(TierEvictionCallback callback) = 0;
  // Tiers that cannot tell (a remote pool shared by many workers) keep the default: no calls.
  virtual void set_removed_callback(TierRemovedCallback callback) { (void)callback; }
  // The blocks found at start-up that the tier still holds, once (later calls: none). A tier
  // forgets them at its first poll(): take them before the step loop starts. Default: none.
  virtual FoundBlocks take_found_blocks() { return {}; }
  // The tier's own timed probe transfer, once (later calls, and tiers that time none: {}). Never blocks.
  virtual TransferSample take_transfer_sample() { return {}; }
};

}  // namespace pagoda::kvcache
