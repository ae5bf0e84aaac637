// KvEventSubscriber: follows one instance's KV events (a ZeroMQ SUB socket on its endpoint,
// filtered by topic prefix) into a BlockIndex, on a thread of its own, through an EventFollower.
//
// Sync. At start, after a restart of the instance, after an undecodable batch, and whenever
// request_resync() asks, it loads the instance's full state from `snapshot_source` (the worker's
// /v1/kv/events/snapshot: blocks per medium as of batch S) and then applies every batch after S
// (batches queued meanwhile that the snapshot covered are skipped). A gap in the sequence
// numbers is filled from the replay socket when there is one (a DEALER: ["", start seq] ->
// ["", seq, payload]... ["", -1, ""]; vLLM's newer [.., topic, seq, payload] replies are read
// too) and by a resync when replay cannot fill it (no replay socket, the batches aged out, the
// publisher skipped the numbers of dropped events, no answer within replay_timeout_s).
// While unsynced the index is empty (a router then predicts no overlap for the instance) and a
// resync is tried at most once per resync_interval_s (the clock is injected).
//
// The snapshot source runs on the subscriber thread and may block (an HTTP GET).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"
#include "events/block_index.h"
#include "events/event_follower.h"
#include "events/zmq_socket.h"

namespace pagoda::events {

struct SubscriberConfig {
  std::string endpoint;          // the instance's PUB endpoint (connected to)
  std::string replay_endpoint;   // its ROUTER endpoint; "" = none
  std::string topic;             // prefix filter ("" = everything)
  double replay_timeout_s = 2.0; // per reply message
  double resync_interval_s = 1.0;
};

struct SubscriberStats {
  int64_t batches_applied = 0;
  int64_t events_applied = 0;
  int64_t unknown_events = 0;
  int64_t gaps = 0;              // sequence gaps seen on the live stream
  int64_t gaps_filled = 0;       // of which replay filled
  int64_t replays = 0;           // replay requests sent
  int64_t resyncs = 0;           // snapshots applied
  int64_t resync_failures = 0;   // snapshots that could not be loaded
  int64_t restarts = 0;          // the stream went backwards (a new process)
  int64_t malformed = 0;         // undecodable batches or frames
  int64_t next_seq = 0;
  bool synced = false;
};

using SnapshotSource = std::function<Result<KvEventsSnapshot>()>;

class KvEventSubscriber {
 public:
  KvEventSubscriber(SubscriberConfig config, BlockIndex& index, SnapshotSource snapshot_source, const Clock& clock,
                    const Logger& logger);
  ~KvEventSubscriber();  // stop()
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Connects (errors: a malformed endpoint) and starts the thread, which syncs first.
  Status start();
  void stop();
  // Any thread: resync at the next opportunity.
  void request_resync();
  // Any thread, called periodically with the publisher's own last sequence number (e.g. from
  // the worker's /v1/kv/events): a batch the publisher had sent at the previous call that has
  // still not arrived was lost at the tail, where no later batch reveals the gap: resync.
  void note_published(int64_t last_seq);
  SubscriberStats stats() const;

 private:
  void run();
  void receive_live();
  void on_live(int64_t seq, std::string_view payload);
  // Replays from follower_.next_seq(); true when the replay answered (its batches fed through).
  bool replay();
  void resync(bool forced);
  void wake();

  const SubscriberConfig config_;
  BlockIndex& index_;
  SnapshotSource snapshot_source_;
  const Clock& clock_;
  const Logger& logger_;
  EventFollower follower_;
  ZmqContext context_;
  ZmqSocket sub_, replay_;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> resync_requested_{false};
  int64_t last_resync_ns_ = 0;
  int64_t tail_mark_ = -1;           // the publisher's last seq at the previous note_published
  bool tried_resync_ = false;
  mutable std::mutex stats_mutex_;
  SubscriberStats stats_;
  std::vector<std::string> frames_;  // scratch
  std::thread thread_;
};

}  // namespace pagoda::events
