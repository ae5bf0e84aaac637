// KvEventPublisher: a worker's KV events out over ZeroMQ in vLLM's wire format
// (vllm/distributed/kv_events.py ZmqEventPublisher), so Dynamo, llm-d and our own router can
// follow its cache. It listens to the block manager (kvcache::BlockEventListener: medium "GPU",
// as vLLM names the device pool) and to the tier stack (kvcache::TierEventListener: "CPU",
// "DISK", "REDIS").
//
// Wire. PUB socket on `endpoint` (bound or connected: endpoint_binds). Every message is three
// frames: topic, sequence number (8 bytes, big-endian; 0 for the first batch, +1 per batch),
// msgpack payload (event_codec.h). The first batch is AllBlocksCleared: a subscriber that saw it
// knows the instance started empty. Optional ROUTER socket on `replay_endpoint`: a request
// [identity, "", start seq (8 bytes BE)] (a REQ/DEALER client's envelope; [identity, start] is
// taken too) is answered with [identity, "", seq, payload] for every batch kept (the last
// buffer_steps) with seq >= start, then [identity, "", -1 (8 bytes), ""]. A reply starting above
// `start` means the batches between are gone: the subscriber must resync.
//
// Threads. Listener calls run on the step thread and only append to a bounded queue under a
// mutex (and update the mirror below); when the queue was empty they wake the publisher thread
// through an eventfd. They never block on I/O and, once the queue's buffers have grown to their
// working size, never allocate. The publisher thread owns both sockets: it swaps the queue's
// buffers out, cuts them into batches of at most kMaxBatchEvents events, numbers, encodes and
// sends them, keeps them for replay, and answers replay requests.
//
// Loss is visible. Beyond max_queue_size queued events, new events are dropped and counted and a
// loss marker is queued in their place; the publisher skips one sequence number there, so every
// subscriber sees a gap that replay cannot fill and resyncs from snapshot().
//
// Snapshot (the worker's full dump for a resync). The publisher mirrors every event it accepted
// (dropped ones too) in a BlockIndex. snapshot() copies the mirror and queues a barrier in one
// critical section; the publisher thread closes the current batch at the barrier and reports
// the last sequence number sent before it. So the snapshot is exactly the state after batch
// `seq`: apply it, then every batch after `seq`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "events/block_index.h"
#include "events/kv_event.h"
#include "events/kv_events_config.h"
#include "events/zmq_socket.h"
#include "kvcache/block_events.h"

namespace pagoda::events {

struct PublisherStats {
  int64_t batches_published = 0;
  int64_t events_published = 0;
  int64_t events_dropped = 0;     // queue full: lost (a sequence number was skipped)
  int64_t send_failures = 0;      // the PUB socket refused a message (its seq is missing)
  int64_t replay_requests = 0;
  int64_t replay_rejected = 0;    // malformed requests
  int64_t last_seq = -1;          // of the last batch sent; -1: none yet
  int64_t max_queue_depth = 0;    // most events waiting at once
};

class KvEventPublisher final : public kvcache::BlockEventListener, public kvcache::TierEventListener {
 public:
  static constexpr size_t kMaxBatchEvents = 512;
  static constexpr const char* kDeviceMedium = "GPU";

  // Binds/connects both sockets (errors: an endpoint in use or unresolvable) and starts the
  // publisher thread. unix_time: the batches' timestamps (seconds since the epoch).
  // Precondition: config.publishes().
  static Result<std::unique_ptr<KvEventPublisher>> create(const KvEventsConfig& config,
                                                          std::function<double()> unix_time, const Logger& logger);
  ~KvEventPublisher() override;  // stop()
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Step thread (block_events.h).
  void on_blocks_stored(std::span<const kvcache::BlockInfo> chain) override;
  void on_block_evicted(const kvcache::BlockInfo& block) override;
  void on_tier_stored(std::string_view medium, std::span<const kvcache::BlockInfo> blocks) override;
  void on_tier_removed(std::string_view medium, std::span<const kvcache::BlockHash> hashes) override;

  // Any thread. Waits (at most timeout_s) for the publisher thread to reach the barrier;
  // kUnavailable when it did not (stopped, or too slow).
  Result<KvEventsSnapshot> snapshot(double timeout_s = 5.0);
  PublisherStats stats() const;
  const KvEventsConfig& config() const { return config_; }
  // Where subscribers reach it: the endpoints as bound (a wildcard port resolved), "" for none.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // Sends what is queued, then stops the thread and closes the sockets. Idempotent.
  void stop();

 private:
  enum class Kind : uint8_t { kEvent, kBarrier, kLoss };
  // One queued event; its hashes and tokens are ranges of the queue's flat arrays.
  struct Pending {
    Kind kind = Kind::kEvent;
    KvEventType type = KvEventType::kBlockStored;
    uint8_t medium = 0;             // index into media_
    bool has_parent = false;
    uint64_t parent = 0;
    uint64_t salt_key = 0;          // extra key of every block (0: none)
    int32_t block_size = 0;
    uint32_t hash_begin = 0, num_hashes = 0;
    uint32_t token_begin = 0, num_tokens = 0;
    uint64_t barrier_id = 0;
  };
  struct Queue {
    std::vector<Pending> events;
    std::vector<uint64_t> hashes;
    std::vector<int32_t> tokens;
    int64_t num_events = 0;         // kind == kEvent
    void clear();
  };

  KvEventPublisher(const KvEventsConfig& config, std::function<double()> unix_time, const Logger& logger);
  Status open_sockets();
  // Step-thread side; the caller holds mutex_.
  uint8_t medium_id_locked(std::string_view medium);
  bool admit_locked();  // room for one more event? (else a loss marker is queued)
  void push_stored_locked(uint8_t medium, std::span<const kvcache::BlockInfo> run);
  void push_removed_locked(uint8_t medium, uint64_t hash);
  void push_cleared_locked();
  void wake_locked(bool was_empty);

  // Publisher thread.
  void run();
  void publish(const Queue& queue, const std::vector<std::string>& media);
  void send_batch(KvEventBatch& batch);
  KvEvent to_event(const Queue& queue, const Pending& p, const std::vector<std::string>& media) const;
  void serve_replay();

  const KvEventsConfig config_;
  std::function<double()> unix_time_;
  const Logger& logger_;
  ZmqContext context_;
  ZmqSocket pub_, replay_;          // owned by the publisher thread once it runs
  std::string endpoint_, replay_endpoint_;
  int wake_fd_ = -1;                // eventfd

  mutable std::mutex mutex_;        // guards everything below up to the thread's own state
  std::condition_variable barrier_cv_;
  Queue queue_;                     // filled by the step thread
  std::vector<std::string> media_;  // medium names by id
  BlockIndex mirror_;               // every accepted event applied (updated under mutex_)
  bool loss_marked_ = false;        // the queue's last entry is a loss marker
  bool stopping_ = false;
  bool stopped_ = false;
  uint64_t next_barrier_ = 1;
  std::map<uint64_t, int64_t> barrier_seqs_;  // resolved barriers -> last seq before them
  PublisherStats stats_;

  // Publisher thread only.
  Queue sending_;                   // the buffers swapped out of queue_
  std::deque<std::pair<int64_t, std::string>> replay_buffer_;  // [buffer_steps] (seq, payload)
  int64_t next_seq_ = 0;
  std::string payload_;             // scratch
  std::vector<std::string> frames_; // scratch
  std::thread thread_;
};

}  // namespace pagoda::events
