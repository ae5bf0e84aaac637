// LeaseTable: blocks an instance holds for a peer that will read them (P/D disaggregation:
// the prefill side computed a prompt's KV; the decode side pulls it with one-sided gets).
//
// A lease names pool blocks that the owner keeps pinned (never evicted, so never rewritten)
// from grant() until the lease ends. Each block reference handed to the peer carries the
// block's generation at grant time; a block's generation changes whenever the last lease on it
// ends, which always happens before the owner may unpin (and so reuse) it. The peer reads the
// bytes first and confirms afterwards: confirm() succeeds only if the lease is still live and
// every (block, generation) pair matches, which proves the block was pinned, with the same
// contents, during the whole read (validate after read, as a seqlock does). Anything else
// (unknown or ended lease, expired, a generation or block that does not match) is refused and
// the peer must discard what it read.
//
// Lease states:  granted ──confirm ok──▶ ended(confirmed) ──take_ended──▶ reaped (forgotten)
//                   │  └──confirm refused (stale refs)──▶ ended(refused) ─┘
//                   └──now >= expires (seen by confirm/take_ended/next_deadline)──▶ ended(expired)
// Only reaped leases have released their pins: the owner drops the pins of every lease
// take_ended() returns, on the thread that drives its block manager.
//
// Thread-safe (one mutex): the owner grants and reaps on its step thread, the transfer thread
// confirms. Time comes from the injected Clock.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace pagoda::transfer {

struct BlockRef {
  int32_t block = -1;        // pool block id on the lease's owner
  uint64_t generation = 0;   // the block's generation when the lease was granted
  bool operator==(const BlockRef&) const = default;
};

struct Lease {
  uint64_t id = 0;           // never reused (starts at 1)
  std::vector<BlockRef> blocks;
  int64_t expires_ns = 0;
};

struct LeaseStats {
  int64_t granted = 0, confirmed = 0, expired = 0, refused = 0;
  int64_t active = 0;        // granted, not yet ended
  int64_t held = 0;          // not yet reaped (their pins are still held)
};

class LeaseTable {
 public:
  LeaseTable(int64_t num_blocks, const Clock& clock, int64_t ttl_ns);

  // A lease over `blocks` (valid pool ids, the caller holds them pinned), expiring ttl from now.
  Lease grant(std::span<const int32_t> blocks);
  // The peer has read the blocks of lease `id`: ok ends the lease; an error says why the read
  // must be discarded (kNotFound: unknown or ended; kUnavailable: expired; kInvalidArgument:
  // references that do not match the lease).
  Status confirm(uint64_t id, std::span<const BlockRef> refs);
  // Ends expired leases, then hands over (and forgets) every ended lease: the caller unpins
  // their blocks now.
  std::vector<uint64_t> take_ended();
  // The earliest expiry of an active lease (INT64_MAX when none).
  int64_t next_deadline_ns() const;
  uint64_t generation(int32_t block) const;
  LeaseStats stats() const;
  int64_t ttl_ns() const { return ttl_ns_; }

 private:
  enum class State : uint8_t { kActive, kEnded };
  struct Entry {
    Lease lease;
    State state = State::kActive;
  };
  void end_locked(Entry& e);
  void expire_locked(int64_t now);

  const Clock& clock_;
  const int64_t ttl_ns_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> generations_;   // [num_blocks]
  std::vector<int32_t> lease_counts_;   // [num_blocks] active leases naming the block
  std::unordered_map<uint64_t, Entry> leases_;
  uint64_t next_id_ = 1;
  LeaseStats stats_;
};

}  // namespace pagoda::transfer
