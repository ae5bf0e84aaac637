// BlockManager: the block table of every sequence over one BlockPool, with prefix caching
// (a radix index of chained block hashes), copy-on-write forks and pluggable eviction.
//
// A sequence holds blocks covering positions [0, length):
//   slot(p) = block_table[p / block_size] * block_size + p % block_size.
// Its first num_computed tokens have KV written (the engine says so with commit). Committed
// full blocks are registered in the prefix index; when no sequence holds them any more they
// stay *cached* (block_pool.h) until a prefix hit reuses them or the eviction policy drops
// them. Running out of blocks is an ordinary answer (plan().fits() is false, append returns
// false and changes nothing).
//
// Engine protocol, in call order:
//   Admission of prompt P (namespace ns: model fingerprint, KV format, tenant salt):
//     PrefixMatch hit = bm.match_prefix(P, ns);  // pins the longest cached prefix, < |P| tokens
//     KvPlan plan = bm.plan(hit, |P|);           // dry run: cached tokens, blocks to allocate
//     if (!plan.fits()) { keep waiting; }        // dropping `hit` unpins
//     SeqId s = bm.add_sequence(max_tokens, {ns, priority});
//     bm.adopt(s, std::move(hit));               // length(s) == num_computed(s) == hit.num_tokens()
//   Each step, for each scheduled sequence s and its new tokens T (prefill chunk / decode token):
//     copies.clear();
//     if (!bm.append(s, T, slots, copies)) { preempt or wait; }  // nothing changed
//     for (BlockCopy c : copies) pool.copy_block(c.src_block, c.dst_block);  // in order, before
//                                                                             // any forward
//     forward(...)          // writes the K/V of T at `slots`
//     bm.commit(s);         // only once that forward succeeded: registers the full blocks
//   bm.fork(s)              // after commit: a child sharing every block (parallel sampling)
//   bm.truncate(s, n)       // drop tokens from the end (e.g. rejected draft tokens)
//   bm.free_sequence(s)     // releases tail first: committed blocks become cached
//
// Loading from tiers (kvcache/tier_stack.h; block_manager_load.cpp). After adopt, blocks
// found in a lower tier are loaded into fresh pool blocks:
//     bm.begin_load(s, T)     // T: the next whole blocks of the prompt; allocates them (evicting
//                             // as append does); length += |T|, num_computed unchanged: the
//                             // blocks are *loading* (in use, ref 1, unregistered, unreadable)
//     ... tier gets write the blocks' KV (BlockPool::block_segments) ...
//     bm.finish_load(s, n_ok, record_tokens)  // the first n_ok blocks hold verified KV whose
//                             // records carry record_tokens: each is confirmed against T,
//                             // registered like commit; from the first unconfirmed block on,
//                             // blocks are released (truncate): the engine recomputes them
// A loading sequence takes no append, commit, fork or truncate until finish_load; it may be
// freed (free_sequence) only once no get writes into its blocks any more.
//
// Windows (sliding-window models, StreamingLLM). A sequence added with cacheable = false is
// never registered in the prefix index (commit records nothing), is never forked, and never
// adopts a match. Only such a sequence may
//   bm.release_block(s, j)  // frees block j (ref 1, unregistered) and leaves a hole (-1) in
//                           // the table: positions [j*B, (j+1)*B) are gone, length unchanged
//   bm.drop_block(s, j)     // frees block j and removes its entry: later positions move down
//                           // by block_size, length -= block_size (StreamingLLM eviction)
// Holes are skipped by free_sequence/truncate and by check_integrity; attention must not read
// them (kernels skip blocks outside the mask). The last block is never a hole.
// Selection (kvcache/kv_select.h). A sequence added with SequenceOptions::select on is not
// cacheable (as above) and keeps a KvSelectState: the logical position and score of each
// stored row. The engine adds scores (select_state) and, before an append, may
//   bm.compact(s, victims)  // drops the victim rows: holes are filled by moving rows from the
//                           // tail (every layer's K and V), then the tail is truncated, freeing
//                           // emptied blocks; length -= |victims|, positions keep their values
// plan() of an evicting selecting sequence counts the blocks held after that eviction.
// Copies come only from append into a partly filled last block that is shared (after fork)
// or registered (after truncate into a committed block): the writer gets a private copy.
//
// Not thread-safe: one scheduler thread drives it. A PrefixMatch must not outlive its manager.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_events.h"
#include "kvcache/block_hash.h"
#include "kvcache/block_pool.h"
#include "kvcache/eviction.h"
#include "kvcache/kv_select.h"
#include "kvcache/prefix_index.h"

namespace pagoda::kvcache {

using SeqId = int64_t;
class BlockManager;

struct BlockManagerOptions {
  EvictionPolicyKind eviction = EvictionPolicyKind::kLru;
  LogicalClock* clock = nullptr;           // nullptr: the manager keeps its own
  BlockHashFn hash_fn = &hash_block;       // tests inject colliding hashes
};

struct SequenceOptions {
  KvNamespace ns;        // what its cached blocks are valid for
  int32_t priority = 0;  // for EvictionPolicyKind::kPriority: higher is kept longer
  bool cacheable = true;  // false: never registered/forked/adopted; may release_block/drop_block
  KvSelectParams select;  // on: attention-score selection (normalized; forces cacheable false)
  int64_t select_prompt = 0;  // SnapKV: prompt tokens (the observation window ends there)
};

// Copy block src onto dst (every layer's K and V) before writing into dst.
struct BlockCopy {
  int32_t src_block = -1;
  int32_t dst_block = -1;
};

// The answer of a dry run; nothing is allocated, pinned or counted.
struct KvPlan {
  int64_t num_cached_tokens = 0;  // prompt plans: tokens served by the cache (sequence plans: 0)
  int64_t num_new_blocks = 0;     // blocks to allocate, copy-on-write blocks included
  int64_t num_copies = 0;         // copy-on-write copies the append would report (0 or 1)
  int64_t num_available = 0;      // free + reclaimable cached blocks, less those this plan reuses
  bool fits() const { return num_new_blocks <= num_available; }
};

struct BlockManagerStats {
  int64_t num_lookups = 0;            // match_prefix calls
  int64_t num_hit_tokens = 0;         // prompt tokens matched by them
  int64_t num_missed_tokens = 0;      // prompt tokens not matched
  int64_t num_evictions = 0;          // cached blocks dropped by the eviction policy
  int64_t num_blocks_allocated = 0;   // blocks taken for writing (fresh and copy-on-write)
  int64_t num_cow_copies = 0;
  int64_t num_committed_blocks = 0;   // blocks registered in the prefix index
};

// A matched cached prefix: full blocks, root first. Move-only; while it lives its blocks are
// pinned (never evicted). Consumed by BlockManager::adopt, or unpinned when dropped.
class PrefixMatch {
 public:
  PrefixMatch() = default;
  PrefixMatch(PrefixMatch&& other) noexcept { *this = std::move(other); }
  PrefixMatch& operator=(PrefixMatch&& other) noexcept;
  PrefixMatch(const PrefixMatch&) = delete;
  PrefixMatch& operator=(const PrefixMatch&) = delete;
  ~PrefixMatch() { reset(); }

  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  std::span<const int32_t> blocks() const { return blocks_; }
  const KvNamespace& ns() const { return ns_; }
  bool empty() const { return blocks_.empty(); }
  void reset();  // unpins now; leaves an empty match

 private:
  friend class BlockManager;
  BlockManager* manager_ = nullptr;
  std::vector<int32_t> blocks_;  // [num_blocks] pinned block ids
  KvNamespace ns_;
  int64_t num_tokens_ = 0;       // num_blocks x block_size
};

class BlockManager {
 public:
  explicit BlockManager(BlockPool& pool, const BlockManagerOptions& options = {});
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;
  ~BlockManager();  // frees every sequence; aborts if a PrefixMatch is still alive

  // Registers an empty sequence; reserves its table for `max_tokens` so appends do not allocate.
  SeqId add_sequence(int64_t max_tokens, const SequenceOptions& options = {});
  bool has_sequence(SeqId seq) const { return tables_.count(seq) != 0; }
  // Releases every block of the sequence, tail first, and forgets it.
  void free_sequence(SeqId seq);

  // Longest run of cached full blocks that starts `tokens`, confirmed token by token, capped
  // at (|tokens| - 1) / block_size blocks so the last token is always computed. Pins them;
  // never changes the index or any recency. Counts a lookup.
  PrefixMatch match_prefix(std::span<const int32_t> tokens, const KvNamespace& ns);
  // Pins every cached full block that starts `tokens` (up to |tokens| / block_size blocks: a
  // long-lived pin of a computed prompt, kvcache/cache_pins.h). Counts nothing, changes no
  // recency.
  PrefixMatch pin_prefix(std::span<const int32_t> tokens, const KvNamespace& ns);
  // Gives the empty sequence `seq` the matched blocks (refs +1): length = num_computed =
  // match.num_tokens(). Preconditions: length(seq) == 0, match from this manager, same ns.
  void adopt(SeqId seq, PrefixMatch&& match);

  // Dry runs. Growing `seq` by n_new tokens:
  KvPlan plan(SeqId seq, int64_t n_new) const;
  // A new sequence for a prompt of n_prompt tokens that will adopt `match`:
  KvPlan plan(const PrefixMatch& match, int64_t n_prompt) const;
  // The same without pinning anything (matches like match_prefix, counts nothing):
  KvPlan plan(std::span<const int32_t> prompt, const KvNamespace& ns) const;
  int64_t blocks_needed(SeqId seq, int64_t n_new) const { return plan(seq, n_new).num_new_blocks; }

  // Apply: grows seq by tokens.size() tokens, recording their ids; slots_out[i] = slot of
  // position length + i. Appends at most one copy to copies_out, which the caller must do
  // (BlockPool::copy_block, in order) before KV is written. Returns false, changing nothing,
  // when plan(seq, n).fits() is false. Evicts cached blocks as needed.
  bool append(SeqId seq, std::span<const int32_t> tokens, std::span<int64_t> slots_out,
              std::vector<BlockCopy>& copies_out);
  // Compatibility: token ids unknown, so the sequence is never cached from here on; a
  // copy-on-write copy is done at once.
  bool append(SeqId seq, int64_t n_new, std::span<int64_t> slots_out);
  // The KV of every appended token has been written: registers each full block not yet in
  // the prefix index. Call after the forward pass that wrote them, never before.
  void commit(SeqId seq);
  // A new sequence sharing every block of `seq` (refs +1), with its tokens, namespace and
  // priority. Precondition: seq is committed (num_computed == length).
  SeqId fork(SeqId seq);
  // Drops tokens from the end (keeps the first new_length), releasing emptied blocks tail first.
  void truncate(SeqId seq, int64_t new_length);
  // Loading (see the top). begin_load preconditions: seq cacheable, tokens known, not loading,
  // num_computed == length, length and |tokens| whole blocks. Returns false, changing nothing,
  // when the blocks do not fit. finish_load returns the blocks registered (<= n_ok).
  bool begin_load(SeqId seq, std::span<const int32_t> tokens);
  int64_t finish_load(SeqId seq, int64_t n_ok, std::span<const int32_t> record_tokens);
  bool loading(SeqId seq) const { return table(seq).loading; }
  // Evicts every evictable cached block now (listeners see each eviction: write-back moves
  // them down). Benchmarks and tests use it to empty the pool. Returns the blocks evicted.
  int64_t evict_all_cached();
  // The pool blocks of seq being loaded (valid until finish_load).
  std::span<const int32_t> loading_blocks(SeqId seq) const;
  // begin_load's preconditions on seq hold (cacheable, tokens known, not loading, every token
  // committed, whole blocks): callers outside the engine (the C API) check before begin_load.
  bool loadable(SeqId seq) const;
  // The chained hash of seq's last committed full block (kRootBlockHash when none).
  BlockHash last_block_hash(SeqId seq) const;
  // Appends the loading blocks of every sequence to out (introspection: the block map).
  void append_all_loading_blocks(std::vector<int32_t>& out) const;
  // Swap preemption (engine/scheduler.h): every committed full block of seq, root first, as
  // the listeners see them (tokens point into seq's table: valid until it changes). Empty for
  // a sequence that is loading, uncacheable or whose tokens are unknown.
  void committed_blocks(SeqId seq, std::vector<BlockInfo>& out) const;
  // Windows (see the top). Preconditions: seq not cacheable, j below the last block, block j
  // not a hole, and held by this table only (ref 1).
  void release_block(SeqId seq, int64_t j);
  void drop_block(SeqId seq, int64_t j);
  // Blocks the table holds (holes not counted).
  int64_t num_held_blocks(SeqId seq) const;
  // Selection (see the top; block_manager_select.cpp). select_state is null unless selecting.
  // compact preconditions: selecting, num_computed == length, victims ascending, distinct,
  // < length, every block of the table held by it alone; not int4 KV.
  const KvSelectState* select_state(SeqId seq) const { return table(seq).select.get(); }
  KvSelectState* select_state(SeqId seq) { return table(seq).select.get(); }
  void compact(SeqId seq, std::span<const int64_t> victims);
  // Position of the next token appended: length, plus the rows a selecting sequence evicted.
  int64_t next_position(SeqId seq) const;

  int64_t length(SeqId seq) const { return table(seq).length; }
  int64_t num_computed(SeqId seq) const { return table(seq).num_computed; }
  const std::vector<int32_t>& block_table(SeqId seq) const { return table(seq).blocks; }
  int64_t num_sequences() const { return static_cast<int64_t>(tables_.size()); }
  // Blocks an allocation can get: free + cached ones that are not pinned.
  int64_t num_available_blocks() const { return pool_.num_free() + pool_.num_cached() - num_pinned_cached_; }
  const BlockManagerStats& stats() const { return stats_; }
  EvictionPolicyKind eviction_policy() const { return policy_->kind(); }
  const PrefixIndex& index() const { return index_; }
  // Read-only views for introspection (engine/introspection.h).
  const BlockUsage& usage(int32_t block) const { return usage_[block]; }
  int32_t pin_count(int32_t block) const { return pins_[block]; }
  uint64_t logical_now() const { return clock_->now(); }
  BlockHashFn hash_fn() const { return hash_fn_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  // Listeners are told of stored and evicted blocks (block_events.h), in the order added.
  // Not owned; each must outlive the manager or be removed first.
  void add_listener(BlockEventListener* listener);
  void remove_listener(BlockEventListener* listener);

  // Aborts unless: pool states agree (free + cached + in use == total); each ref count equals
  // the number of tables holding the block; registered <=> cacheable; cached => registered;
  // every table's committed blocks are registered with its hashes; ancestors of blocks in use
  // (of pinned blocks) are in use (pinned); the policy holds exactly the evictable blocks.
  void check_integrity() const;

 private:
  friend class PrefixMatch;
  struct Table {
    std::vector<int32_t> blocks;          // [ceil(length / block_size)] block ids; -1: hole
    std::vector<int32_t> tokens;          // [length] token ids, while tokens_known
    std::vector<BlockHash> block_hashes;  // [committed full blocks] chained hashes
    int64_t length = 0;                   // tokens held
    int64_t num_computed = 0;             // tokens with KV written (<= length)
    KvNamespace ns;
    uint64_t ns_key = 0;                  // ns.key()
    int32_t priority = 0;
    bool tokens_known = true;             // false after a compatibility append
    bool cacheable = true;                // SequenceOptions::cacheable
    bool loading = false;                 // blocks [num_computed / B, length / B) are loading
    std::unique_ptr<KvSelectState> select;  // selecting sequences only
  };
  const Table& table(SeqId seq) const;
  Table& table(SeqId seq);
  // after_eviction: as plan() says (an evicting selecting sequence compacts first); false: this
  // very append.
  KvPlan plan_table(const Table& t, int64_t n_new, bool after_eviction) const;
  bool needs_copy(const Table& t, int64_t n_new) const;
  bool append_tokens(Table& t, int64_t n_new, const int32_t* tokens, std::span<int64_t> slots_out,
                     std::vector<BlockCopy>* copies_out);
  int32_t allocate_block(int32_t priority);
  void evict_one();
  void acquire(int32_t block, int32_t priority);  // a table takes a block in use or cached
  void release(int32_t block, int32_t priority);  // a table drops a block
  void pin(int32_t block);
  void unpin(int32_t block);
  void update_evictable(int32_t block);
  void check_select(SeqId id, const Table& t) const;  // check_integrity of a selecting table
  // Registers full blocks [block_hashes.size(), num_computed / B) of t (commit's work).
  void register_blocks(Table& t);
  uint64_t tick() { return clock_->tick(); }

  BlockPool& pool_;
  BlockHashFn hash_fn_;
  LogicalClock own_clock_;
  LogicalClock* clock_;
  PrefixIndex index_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<BlockUsage> usage_;  // [num_blocks]
  std::vector<int32_t> pins_;      // [num_blocks] live PrefixMatch pins
  int64_t num_pins_ = 0;           // sum of pins_
  int64_t num_pinned_cached_ = 0;  // cached blocks with pins_ > 0
  BlockManagerStats stats_;
  std::vector<BlockEventListener*> listeners_;
  std::vector<BlockInfo> stored_scratch_;  // [blocks committed by one commit()]
  std::unordered_map<SeqId, Table> tables_;
  SeqId next_seq_id_ = 0;
};

}  // namespace pagoda::kvcache
