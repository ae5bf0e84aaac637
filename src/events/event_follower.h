// EventFollower: applies one instance's event batches to a BlockIndex in sequence order and
// says when its state can no longer be trusted. No sockets: KvEventSubscriber feeds it what the
// SUB and replay sockets receive; the tests feed it directly.
//
// States: unsynced (nothing trusted; every batch is refused) --reset(snapshot at S)--> synced,
// expecting S + 1. Per batch from the live stream:
//   seq == next          applied, next = seq + 1
//   seq < next           stale (queued before the snapshot that covered it): skipped
//   seq > next           a gap: batches next..seq-1 are missing. The caller replays them (feeding
//                        each through on_replayed) and then retries this one through
//                        on_replayed too (applied now, or stale if the replay had it), or resyncs.
//   seq <= last seen     the stream went backwards: a new process (seq restarts at 0) -> unsynced
//   undecodable          its events are lost -> unsynced
// A live stream's numbers only grow, so "backwards" is always a restart; batches from replay
// (on_replayed) may repeat what was seen and are only applied or skipped.
#pragma once

#include <cstdint>
#include <string_view>

#include "events/block_index.h"
#include "events/event_codec.h"

namespace pagoda::events {

class EventFollower {
 public:
  enum class Verdict { kApplied, kStale, kGap, kRestarted, kUnsynced, kMalformed };

  explicit EventFollower(BlockIndex& index) : index_(&index) {}

  // The instance's full state as of batch snapshot.seq: the index becomes it.
  void reset(const KvEventsSnapshot& snapshot);
  // Forget everything (the index is emptied): nothing is trusted until the next reset.
  void unsync();

  Verdict on_batch(int64_t seq, std::string_view payload);     // from the live stream
  Verdict on_replayed(int64_t seq, std::string_view payload);  // from a replay reply

  bool synced() const { return synced_; }
  int64_t next_seq() const { return next_; }
  int64_t batches_applied() const { return batches_applied_; }
  int64_t events_applied() const { return events_applied_; }
  int64_t unknown_events() const { return unknown_events_; }

 private:
  Verdict apply(int64_t seq, std::string_view payload);

  BlockIndex* index_;
  bool synced_ = false;
  int64_t next_ = 0;             // the next seq to apply
  int64_t last_live_ = -1;       // the last seq seen on the live stream
  int64_t batches_applied_ = 0, events_applied_ = 0, unknown_events_ = 0;
};

}  // namespace pagoda::events
