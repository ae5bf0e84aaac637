// The disk tier's bookkeeping, free of I/O (kvcache/disk_tier.h has the design):
//   RunAllocator  which of n units (disk slots, staging buffers) are free, handed out in runs of
//                 consecutive units so that a chain lands in consecutive slots and is read and
//                 written with few large requests.
//   SlotTable     the state of every slot, the index (block hash -> slot), eviction order.
//
// Slot states (a slot is in exactly one):
//
//   free ─begin_write─▶ writing ─begin_commit─▶ committing ─commit─▶ ready (pin/unpin, touch)
//   writing, committing ─release─▶ free            (the write failed, or erased while writing)
//   ready ─evict─▶ free                            (no eviction callback)
//   ready ─evict(demote)─▶ demoting ─release─▶ free (read back for the eviction callback)
//   ready (doomed, no pins), committing (doomed), demoting (record bad)
//         ─begin_invalidate─▶ invalidating ─release─▶ free
//   free ─adopt─▶ ready                            (start-up: a complete record found)
//
//   writing       its record is being written with a zero magic: on disk it is not a record yet
//   committing    the record is whole on disk; its first page, now with the magic, is being
//                 written: the write that makes it visible to a restart
//   ready         indexed (lookup and get see it); an eviction candidate while pins == 0
//   demoting      out of the index, being read to hand to the eviction callback
//   invalidating  out of the index, a zero page going over its header so a restart cannot
//                 find it again
// A slot with pins > 0 (a get reading it) is never evicted, overwritten or invalidated. doom()
// takes a slot out of the index at once (erase, corrupt record) and lets the caller invalidate
// it once no read and no write of it is in flight. Eviction order: kvcache/eviction.h over
// slot ids (priority, then least recently used, by a logical tick per touch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kvcache/block_hash.h"
#include "kvcache/eviction.h"

namespace pagoda::kvcache {

class RunAllocator {
 public:
  struct Run {
    int64_t first = 0;
    int64_t count = 0;  // 0: nothing was free
  };

  explicit RunAllocator(int64_t num_units);  // all free
  int64_t size() const { return num_units_; }
  int64_t num_free() const { return num_free_; }
  bool is_free(int64_t unit) const;

  // Takes up to max_n consecutive free units: the first free run of at least max_n at or after
  // the cursor, else the first such run from the start, else the longest free run. The cursor
  // moves past the run, so successive allocations fill the space in order.
  Run allocate(int64_t max_n);
  void take(int64_t unit);                      // Precondition: free
  void release(int64_t first, int64_t count);   // Precondition: every unit used

 private:
  void set(int64_t unit, bool used);
  // Length of the free run starting at `unit`, up to `limit` units.
  int64_t free_run(int64_t unit, int64_t limit) const;

  std::vector<uint64_t> used_;  // [ceil(num_units / 64)] bit set = used
  int64_t num_units_;
  int64_t num_free_;
  int64_t cursor_ = 0;
};

enum class SlotState : uint8_t { kFree, kWriting, kCommitting, kReady, kDemoting, kInvalidating };
const char* slot_state_name(SlotState state);

struct Slot {
  BlockHash hash = 0;          // meaningful unless free
  uint64_t last_access = 0;    // logical tick of the last put, get or start-up adoption
  uint64_t num_accesses = 0;
  int32_t priority = 0;        // max priority the block was put with
  int32_t pins = 0;            // gets reading it (ready only)
  SlotState state = SlotState::kFree;
  bool doomed = false;         // out of the index; invalidate when its I/O and pins end
};

class SlotTable {
 public:
  SlotTable(int64_t num_slots, EvictionPolicyKind eviction);

  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  int64_t num_free() const { return free_.num_free(); }
  int64_t num_ready() const { return static_cast<int64_t>(index_.size()); }
  // Slots that will be free without a new eviction (demoting or invalidating).
  int64_t num_incoming() const { return num_incoming_; }
  const Slot& slot(int64_t id) const { return slots_[static_cast<size_t>(id)]; }

  // The ready, not doomed slot holding `hash`.
  std::optional<int64_t> find(BlockHash hash) const;
  // The slot whose write of `hash` is in flight (writing or committing, not doomed).
  std::optional<int64_t> find_writing(BlockHash hash) const;

  // Free slots for new records (see RunAllocator::allocate); each must then begin_write.
  RunAllocator::Run allocate(int64_t max_n) { return free_.allocate(max_n); }
  void begin_write(int64_t id, BlockHash hash, int32_t priority);  // allocated -> writing
  void begin_commit(int64_t id);                                   // writing -> committing
  void commit(int64_t id);                                         // committing -> ready
  void release(int64_t id);  // writing, committing, demoting, invalidating -> free

  // A put or get of a ready slot: most recently used now; priority raised to `priority`.
  void touch(int64_t id, int32_t priority);
  void pin(int64_t id);      // ready: not evictable while pinned
  // Returns true when the slot is doomed and now unpinned: the caller invalidates it.
  bool unpin(int64_t id);
  void doom(int64_t id);     // ready, writing or committing: out of the index now
  void begin_invalidate(int64_t id);  // doomed, no pins, no I/O -> invalidating

  // The slot eviction would take next (ready, unpinned, not doomed), if any.
  std::optional<int64_t> victim() const { return policy_->victim(); }
  // ready -> demoting (demote) or free.
  void evict(int64_t id, bool demote);

  // Start-up: a free slot found holding a complete record of `hash` becomes ready.
  void adopt(int64_t id, BlockHash hash);

  // Called (synchronously, from doom or evict) with each hash that leaves the index: the
  // tier's removal callback (tier.h).
  void set_removed_callback(std::function<void(BlockHash)> callback) { on_removed_ = std::move(callback); }

  // Aborts unless states, index, free units, eviction candidates and counts agree.
  void check_integrity() const;

 private:
  Slot& at(int64_t id) { return slots_[static_cast<size_t>(id)]; }
  void become_candidate(int64_t id);
  void set_state(int64_t id, SlotState state);

  std::vector<Slot> slots_;                           // [num_slots]
  RunAllocator free_;                                 // [num_slots] free exactly when kFree
  std::unordered_map<BlockHash, int64_t> index_;      // ready, not doomed
  std::function<void(BlockHash)> on_removed_;
  std::unordered_map<BlockHash, int64_t> writing_;    // writing/committing, not doomed
  std::unique_ptr<EvictionPolicy> policy_;            // ready, unpinned, not doomed
  uint64_t tick_ = 0;
  int64_t num_incoming_ = 0;
};

}  // namespace pagoda::kvcache
