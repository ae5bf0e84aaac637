// HostTier: the host DRAM tier (`--kv-host-mem 4G`, 0 = off), a kvcache::Tier (tier.h) over
// BlockRecords (block_record.h) in one slab allocated once at create().
//
// Layout. Every record of the pool's KvLayout has the same size, so the slab is an array of
// fixed-size slots: slot_bytes = record_bytes rounded up to 64 (kRecordAlign), num_slots =
// capacity_bytes / slot_bytes. A slot holds one whole encoded record (header, token ids, payload,
// XXH3 checksum), so what the tier hands to its eviction callback (a demotion to the disk tier)
// and what get() verifies is exactly what every other tier moves.
//
// Bookkeeping is the disk tier's SlotTable (disk_slots.h) without I/O: a put takes a free slot
// (free -> writing -> committing -> ready at once: the copy is a memcpy), eviction is the
// table's policy (priority, then least recently used; puts, gets and lookup hits touch, so
// the blocks a probe found are the last to go while their load is set up), erase and a corrupt
// record drop the slot at once. No slot is ever pinned: get() copies during the call.
//
// Ops complete during the call (memcpy speed: a 1 MiB record in ~0.1 ms) and are reported by
// the next poll(), as tier.h requires. A put of a held hash refreshes it (inclusive tiers).
// A put that needs a slot when none is free evicts the victim first: its record is verified
// and handed to the eviction callback (the stack demotes it to the next tier), then dropped.
//
// Verification: get() decodes the record (checksum, sizes) and checks it against the expected
// hash, namespace and layout (check_block_record) before copying; a record that fails is
// dropped, counted in corrupt_records, and the get fails from that block on.
//
// Threads: driven from one thread (Tier's rule); no threads of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "core/clock.h"
#include "kvcache/disk_slots.h"
#include "kvcache/eviction.h"
#include "kvcache/kv_layout.h"
#include "kvcache/tier.h"

namespace pagoda::kvcache {

struct HostTierOptions {
  int64_t capacity_bytes = 0;      // --kv-host-mem: slab size (rounded down to whole slots)
  KvLayout layout;                 // the pool's: every record has its shape and format
  EvictionPolicyKind eviction = EvictionPolicyKind::kPriority;  // the pool's priority rules
  bool prefault = false;           // touch the slab at create() (serve: no faults in the loop)
};

class HostTier final : public Tier {
 public:
  // Fails when the capacity holds no slot or the slab cannot be allocated. `clock` must
  // outlive the tier (completion times).
  static Result<std::unique_ptr<HostTier>> create(const HostTierOptions& options, const Clock& clock);

  std::string_view name() const override { return "host"; }
  std::string_view medium() const override { return "CPU"; }
  std::string_view memory() const override { return "host DRAM"; }
  bool enabled() const override { return true; }

  TierOpId lookup(std::span<const BlockHash> chain) override;
  TierOpId put(std::span<const TierPut> blocks) override;
  TierOpId get(std::span<const TierGet> blocks) override;
  void erase(std::span<const BlockHash> hashes) override;
  void poll(std::vector<TierCompletion>& out) override;

  TierStats stats() const override;
  void set_eviction_callback(TierEvictionCallback callback) override { on_evict_ = std::move(callback); }
  void set_removed_callback(TierRemovedCallback callback) override { slots_.set_removed_callback(std::move(callback)); }

  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t num_slots() const { return slots_.num_slots(); }
  // One start-up line: capacity in bytes, blocks and tokens.
  std::string describe() const;
  // Test hook: the stored record bytes of `hash` (to flip a byte), if held.
  std::optional<ByteSpan> record_bytes_for_test(BlockHash hash);
  // Aborts unless the slot table is consistent.
  void check_integrity() const { slots_.check_integrity(); }

 private:
  HostTier(const HostTierOptions& options, const Clock& clock, AlignedBuffer slab, int64_t slot_bytes,
           int64_t num_slots);
  uint8_t* slot_data(int64_t slot) { return slab_.data() + slot * slot_bytes_; }
  TierOpId complete(TierOpKind kind, int64_t num_items, int64_t num_ok, Status status, int64_t bytes,
                    int64_t submit_ns);
  Status check_put(const TierPut& block) const;
  // A free slot, evicting (and demoting) the victim when none is free; nullopt when none.
  std::optional<int64_t> take_slot();
  void drop(int64_t slot);  // ready -> free (erase, corrupt)

  HostTierOptions options_;
  const Clock& clock_;
  AlignedBuffer slab_;                 // [num_slots, slot_bytes] encoded records
  int64_t slot_bytes_;
  int64_t record_bytes_;
  SlotTable slots_;                    // [num_slots] index, states, eviction order
  std::vector<TierCompletion> done_;   // finished, not yet polled
  TierEvictionCallback on_evict_;
  TierStats stats_;
  TierOpId next_op_ = 1;
};

}  // namespace pagoda::kvcache
