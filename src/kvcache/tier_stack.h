// TierStack: the tiers below one BlockPool, fastest first (host DRAM, SSD, then a remote tier
// appended last), driven from the step thread. It implements the policy at the top of tier.h:
//
//   Offload. As a BlockEventListener of the pool's BlockManager it writes a cached block's record
//     into the first tier when the pool evicts it (write-back, the default), or every committed
//     full block at once into every tier (`--kv-offload write-through`; eviction then refreshes,
//     a no-op put when the tier still holds the block). A tier added with write_through (the
//     disk tier: persistent, so that a restart, even after SIGKILL, finds what was computed)
//     gets every committed block at once in either mode. put() copies the bytes during the
//     call, so the pool block may be reused right after the listener returns.
//   Demotion. Each tier's eviction callback puts the victim's record into the next tier down;
//     the bottom tier drops it.
//   Probing. probe(chain) finds the longest run of `chain` the tiers hold: tier 0 is asked for
//     the whole chain, each next tier for the rest after the runs above it. Lookups that a tier
//     answers at once (host, disk) are taken in the same call; otherwise the probe finishes in a
//     later poll(). A lookup only proposes: gets verify each record and the block manager
//     confirms its token ids (BlockManager::finish_load).
//   Loading. load(items) reads blocks into pool blocks the caller allocated (a sequence's
//     loading blocks, block_manager.h) with one get per run of consecutive items of one tier.
//     The destinations must stay allocated and unread until the load is taken (take_load):
//     every get has completed then. num_ok counts the items that succeeded from the first: after
//     a failed item (a miss, a corrupt record, a fault) everything later is recomputed.
//
// KV events. With a TierEventListener set (set_event_listener: the KV event publisher), the
//   stack tells it, with the tier's medium, of every block a put made a tier hold (once per
//   block: a put of a block the tier already holds, a refresh, is not told again) and of every
//   block a tier stopped holding (its removed callback: evicted, erased, dropped as corrupt;
//   every announced block of a tier when the tier turns disabled). Blocks a tier found at
//   start-up (the disk tier's persisted records, Tier::take_found_blocks) are announced as
//   stored when the listener is set, parents before children, so that a router learns what a
//   restarted worker still holds; set it before the step loop first polls (tiers forget them
//   then).
//
// Faults of a tier never fail the stack: a tier that reports enabled() == false answers every op
// at once as a miss; the stack logs once per tier and counts it (TierCounters::disabled).
//
// No block is lost silently. A put of pool blocks (write-through at commit, or an eviction's)
// that a tier refuses as busy (Status unavailable: its write buffers or slots are all in flight,
// as when completions are slow) is kept: the committed blocks it did not store are put again
// at a later poll, after one of that tier's puts completed (or when none is in flight), at most
// kMaxPutRetries times. A kept block is valid while the pool holds it under its hash; when the
// pool evicts it first, on_block_evicted puts it into that tier right then, from the intact
// bytes. Every block a put did not store and that is not kept counts in
// TierCounters::dropped_writes (metric pagoda_kv_tier_dropped_writes_total{tier}): a failure
// that is not "busy" (a bad record), retries used up, the tier disabled, an evicted block's put
// or a demotion that failed. Drops are logged (the first, then at each power of two).
//
// Hooks for later work: add_tier() appends a remote tier below the local ones (its lookups may
// complete in a later poll; probes wait for them); a swap path puts a sequence's blocks
// straight into tier 0 with put_blocks() and brings them back with load().
//
// Threads: one (the step thread). Not copyable; must be destroyed before its BlockPool (the
// owner removes it as a listener first).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "kvcache/block_events.h"
#include "kvcache/block_pool.h"
#include "kvcache/tier.h"

namespace pagoda::kvcache {

inline constexpr int kMaxTiers = 4;  // below the pool: host, disk, remote, one spare

enum class OffloadMode : uint8_t { kWriteBack, kWriteThrough };
std::string_view offload_mode_name(OffloadMode mode);  // "write-back", "write-through"
std::optional<OffloadMode> offload_mode_from_name(std::string_view name);

// Load latencies in seconds, Prometheus "le" buckets (non-cumulative; last: above the bounds).
struct LatencyBuckets {
  static constexpr std::array<double, 14> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                      0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  std::array<int64_t, kBounds.size() + 1> buckets{};
  double sum = 0;
  int64_t count = 0;
  void observe(double seconds);
};

// What the stack did with one tier (TierStats are the tier's own).
struct TierCounters {
  int64_t offloaded_blocks = 0;   // put from the pool (eviction or write-through)
  int64_t demoted_blocks = 0;     // put from the tier above (its eviction)
  int64_t loaded_blocks = 0;      // read into the pool by loads
  int64_t failed_loads = 0;       // blocks of loads that failed here (miss, corrupt, fault)
  int64_t loaded_bytes = 0;
  int64_t load_ns = 0;            // summed get latency (measured bandwidth = bytes / time)
  int64_t dropped_writes = 0;     // blocks a put did not store and that are not kept to retry
  int64_t retried_writes = 0;     // blocks put again after a put refused them as busy
  bool disabled = false;          // seen disabled (logged once)
  LatencyBuckets load_latency;    // per get
};

// chain[begin, begin + count) is held by tier `tier`.
struct TierRun {
  int tier = -1;
  int64_t begin = 0;
  int64_t count = 0;
};

// One block of a load: read chain block `hash` from `tier` into pool block `block`.
struct LoadItem {
  int32_t block = -1;
  BlockHash hash = 0;
  int tier = -1;
};

struct LoadResult {
  int64_t num_items = 0;
  int64_t num_ok = 0;                // consecutive items read and verified from the first
  std::vector<int32_t> tokens;       // [num_items x block_size] record token ids (valid: num_ok)
  Status status;                     // why item num_ok failed (ok for a plain miss)
  int64_t bytes = 0;
  int64_t submit_ns = 0, complete_ns = 0;
};

// The chained hashes of the whole blocks of `tokens` (|tokens| / block_size of them) after a
// block whose hash is `parent` (kRootBlockHash at the root), as the block manager names them.
void chain_hashes(BlockHashFn hash_fn, BlockHash parent, std::span<const int32_t> tokens, int64_t block_size,
                  uint64_t namespace_key, std::vector<BlockHash>& out);

using ProbeId = uint64_t;
using LoadId = uint64_t;

class TierStack final : public BlockEventListener {
 public:
  TierStack(BlockPool& pool, OffloadMode offload, const Clock& clock, const Logger& logger);
  TierStack(const TierStack&) = delete;
  TierStack& operator=(const TierStack&) = delete;
  ~TierStack() override;

  // Appends a tier below the others. Sets its eviction callback (demotion to the next).
  // write_through: it also gets every committed block at once (see Offload above).
  void add_tier(std::unique_ptr<Tier> tier, bool write_through = false);
  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  bool empty() const { return tiers_.empty(); }
  Tier& tier(int i) { return *tiers_[static_cast<size_t>(i)].tier; }
  const Tier& tier(int i) const { return *tiers_[static_cast<size_t>(i)].tier; }
  const TierCounters& counters(int i) const { return tiers_[static_cast<size_t>(i)].counters; }
  OffloadMode offload() const { return offload_; }

  // Tier KV events (see the top); not owned, must outlive the stack or be unset (nullptr).
  void set_event_listener(TierEventListener* listener);

  // BlockEventListener (offload).
  void on_blocks_stored(std::span<const BlockInfo> chain) override;
  void on_block_evicted(const BlockInfo& block) override;
  // Puts pool blocks (in use or cached, KV written) into tier `tier` now (swap-out hook).
  void put_blocks(int tier, std::span<const BlockInfo> blocks);

  // Starts a probe of `chain` (root-most first; copied). See the top.
  ProbeId probe(std::span<const BlockHash> chain);
  // The runs found (in chain order, consecutive from chain[0]) once the probe is done, and
  // forgets it; nullopt while a lookup is outstanding.
  std::optional<std::vector<TierRun>> take_probe(ProbeId id);
  void drop_probe(ProbeId id);  // no longer wanted (its lookups are ignored)

  // Starts reading `items` (chain order) into their pool blocks for namespace ns.
  LoadId load(const KvNamespace& ns, std::span<const LoadItem> items);
  // The result once every get of the load has completed, and forgets it; nullopt before.
  std::optional<LoadResult> take_load(LoadId id);
  int64_t num_loads_in_flight() const { return static_cast<int64_t>(loads_.size()); }
  int64_t num_puts_in_flight() const { return num_puts_in_flight_; }
  // Loads, probes, puts in flight or kept to retry: the owner keeps polling (a put completes its
  // write, which makes the block visible to lookups, only through polls).
  bool has_pending_work() const {
    return !loads_.empty() || !probes_.empty() || num_puts_in_flight_ > 0 || !retries_.empty();
  }
  int64_t num_retries_pending() const { return static_cast<int64_t>(retries_.size()); }
  static constexpr int kMaxPutRetries = 64;

  // Bit t set: tier t holds `hash` now, as far as a lookup answered at once tells (an
  // introspection query: dumps, the dashboard). Slow tiers' late answers are ignored.
  uint32_t holders_now(BlockHash hash);

  // Polls every tier once and routes the completions (never blocks). Call each step.
  void poll();

  // Aborts unless loads, probes and op routing agree.
  void check_integrity() const;

 private:
  struct Level {
    std::unique_ptr<Tier> tier;
    bool write_through = false;
    TierCounters counters;
    std::vector<TierCompletion> completions;  // poll scratch
    std::vector<TierPut> demote_puts;         // [1] scratch of a demotion out of this tier
    std::vector<ConstByteSpan> demote_payload;  // [1]
    std::unordered_set<BlockHash> announced;  // told to the listener as stored, not yet removed
    bool put_completed = false;               // a put completed since the last retry
    int64_t next_drop_log = 1;                // dropped_writes at which to log next
  };
  static constexpr int32_t kRemovedInFlight = -2;  // PendingStore block: removed before its completion
  struct PendingStore {            // a put in flight, for the listener (set only with one)
    std::vector<BlockInfo> blocks; // tokens point into `tokens`; block -1 (kRemovedInFlight: gone)
    std::vector<int32_t> tokens;
  };
  // A put of pool blocks in flight (put_blocks): which blocks it carries, so those it did not
  // store can be kept. blocks[i].block: the pool block, or kRemovedInFlight once evicted.
  struct PoolPut {
    PendingStore blocks;
    bool keep = false;
    int attempt = 0;  // 0: the first put; n: the n-th retry
  };
  struct Retry {      // a committed block to put again (see the top)
    int tier = -1;
    int attempt = 0;
    BlockInfo info;   // tokens point into `tokens`
    std::vector<int32_t> tokens;
  };
  struct Probe {
    std::vector<BlockHash> chain;
    std::vector<TierRun> runs;
    int next_tier = 0;        // the tier to ask next
    int64_t pos = 0;          // chain[pos, ...) not yet found
    TierOpId pending = 0;     // lookup in flight (0: none)
    bool done = false;
    bool dropped = false;
  };
  struct Get {
    int tier = -1;
    int64_t first_item = 0, num_items = 0;
    bool done = false;
    int64_t num_ok = 0;
    Status status;
  };
  struct Load {
    KvNamespace ns;
    std::vector<LoadItem> items;
    std::vector<ByteSpan> dests;   // [num_items x 2 n_layer] pool block segments
    std::vector<TierGet> gets;     // [num_items]
    std::vector<Get> parts;        // one get per run of one tier
    LoadResult result;
    int64_t num_pending = 0;       // parts not yet complete
  };
  struct Route {                   // an op in flight: whose is it
    enum Kind : uint8_t { kProbe, kLoad, kPut, kQuery } kind = kPut;
    uint64_t owner = 0;            // probe or load id
    size_t part = 0;               // load: index into parts
  };
  static uint64_t route_key(int tier, TierOpId op) { return (static_cast<uint64_t>(tier) << 56) ^ op; }

  void step_probe(ProbeId id);
  void on_completion(int tier, const TierCompletion& c);
  void finish_get(LoadId id, Load& load, size_t part, const TierCompletion& c);
  std::optional<TierOpId> put_to(int tier, std::span<const TierPut> puts, bool demotion);
  // keep: the blocks are committed in the prefix index (kept for a retry if refused as busy).
  void put_pool_blocks(int tier, std::span<const BlockInfo> blocks, bool keep, int attempt);
  void finish_pool_put(int tier, const TierCompletion& c);
  void retry_puts();
  void count_dropped(int tier, int64_t blocks, const Status& why);
  void demote(int from_tier, const BlockRecordView& record, int32_t priority);
  void note_disabled(int tier);
  void record_store(int tier, TierOpId op, std::span<const TierPut> puts);
  void announce_stored(int tier, TierOpId op, int64_t num_ok);
  void announce_removed(int tier, BlockHash hash);
  void announce_found(int tier);
  void poll_tier(int tier);

  BlockPool& pool_;
  OffloadMode offload_;
  const Clock& clock_;
  const Logger& logger_;
  std::vector<Level> tiers_;
  std::unordered_map<uint64_t, Route> routes_;     // route_key(tier, op) -> owner
  std::unordered_map<ProbeId, Probe> probes_;
  std::unordered_map<LoadId, Load> loads_;
  TierEventListener* listener_ = nullptr;
  std::unordered_map<uint64_t, PendingStore> stores_;  // route_key(tier, op) of puts, with a listener
  std::unordered_map<uint64_t, PoolPut> pool_puts_;    // route_key(tier, op) of puts of pool blocks
  // [num_blocks] the pool puts in flight carrying each pool block (pool_puts_ key, index in its
  // blocks): an eviction finds its puts without a scan of every put in flight (a prefill that
  // evicts n blocks before the next poll was O(n^2) with the scan).
  struct PutRef {
    uint64_t key = 0;
    uint32_t index = 0;
  };
  std::vector<std::vector<PutRef>> puts_by_block_;
  std::vector<Retry> retries_;                          // chain order per tier
  std::vector<BlockInfo> retry_scratch_;
  std::vector<BlockInfo> announce_scratch_;
  uint64_t next_id_ = 1;
  uint32_t query_bits_ = 0;                      // holders_now's answer being gathered
  int64_t num_puts_in_flight_ = 0;
  // Scratch (sized at the first use, reused).
  std::vector<TierCompletion> completions_;
  std::vector<TierPut> puts_;
  std::vector<ByteSpan> segments_;              // [n blocks x 2 n_layer]
  std::vector<ConstByteSpan> const_segments_;   // the same, read-only
};

}  // namespace pagoda::kvcache
