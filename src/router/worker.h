// Worker: one `pagoda serve` instance behind the router: its address, what it says about itself
// (WorkerInfo), the index of the blocks it holds (followed from its KV events by a
// KvEventSubscriber), whether it is up, and the router's own bookkeeping of what it sent there.
//
// Health: down until the first check succeeds. check() (the health thread, every interval)
// asks GET /health and GET /v1/kv/events: a failure, a 503 (draining) or an unreadable answer
// takes it down; a success brings it back. A request that cannot reach it takes it down at once.
// Each successful check also tells the subscriber how far the worker has published (tail loss)
// and whether the worker restarted (a new instance_id: resync).
//
// Prediction: a worker's index is used only when the worker hashes blocks the way this router
// does (the same scheme, prefix caching on, KV events on) and tokenizes as the router does (its
// tokenizer probe matches); otherwise it gets requests by load alone.
//
// In-flight accounting (Dynamo's router-side bookkeeping): a request adds its uncached prompt
// tokens to the pending prefill until its first output arrives, and its blocks (prompt +
// output) to the active blocks until it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"
#include "events/block_index.h"
#include "events/holder_index.h"
#include "events/kv_event_subscriber.h"
#include "router/policy.h"
#include "router/worker_info.h"

namespace pagoda::router {

struct WorkerAddress {
  std::string url;   // as given: http://HOST:PORT
  std::string host;
  int port = 0;
};
// http://HOST:PORT (no path, no TLS).
Result<WorkerAddress> parse_worker_url(const std::string& url);

struct WorkerOptions {
  std::string api_key;            // sent on the router's own calls (/v1/kv/events, snapshots)
  double connect_timeout_s = 2;
  double check_timeout_s = 5;     // health checks and snapshots
  std::vector<int32_t> tokenizer_probe;  // the router's encode_prompt(model::kTokenizerProbe)
};

// One request's share of a worker's load while it runs there.
struct Ticket {
  int64_t prefill_tokens = 0;     // uncached prompt tokens, pending until the first output
  int64_t blocks = 0;             // prompt + output blocks
  bool prefilled = false;
  bool ended = false;
};

struct WorkerCounters {
  int64_t routed = 0;             // requests answered by this worker (any status)
  int64_t failed_attempts = 0;    // attempts that failed before anything reached the client
  int64_t predicted_cached_tokens = 0;
  int64_t reported_cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  int64_t prompt_tokens = 0;      // as the router tokenized them
};

class Worker {
 public:
  // holders (not owned; outlives the worker): the router's inverted index, told this worker's
  // blocks under holder id `id`; nullptr: none.
  Worker(WorkerAddress address, WorkerOptions options, const Clock& clock, const Logger& logger,
         events::HolderIndex* holders = nullptr, int32_t id = -1);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // One health check (blocking HTTP); ok when up. Starts the event subscriber the first time the
  // worker says where its events are.
  Status check();
  void mark_down(const std::string& why);
  bool up() const { return up_; }
  bool predictable() const;
  std::string down_reason() const;

  const WorkerAddress& address() const { return address_; }
  std::optional<WorkerInfo> info() const;
  const events::BlockIndex& index() const { return index_; }
  std::optional<events::SubscriberStats> event_stats() const;

  // How many of `chain` it holds (0 unless predictable). The router asks the inverted index
  // instead (one match for all workers); this is the same answer for one.
  int64_t matched_blocks(std::span<const kvcache::BlockHash> chain) const;
  WorkerLoad load(bool available, int64_t overlap_blocks) const;
  void begin(Ticket& ticket);
  void prefilled(Ticket& ticket);
  void end(Ticket& ticket);

  void count(const WorkerCounters& delta);
  WorkerCounters counters() const;

 private:
  Result<std::string> get(const std::string& path) const;  // the body of a 200, else an error
  Result<events::KvEventsSnapshot> fetch_snapshot() const;
  void follow_events(const WorkerInfo& info);  // (re)starts the subscriber when needed

  const WorkerAddress address_;
  const WorkerOptions options_;
  const Clock& clock_;
  const Logger& logger_;
  events::BlockIndex index_;
  std::atomic<bool> up_{false};

  mutable std::mutex mutex_;      // guards what follows
  std::optional<WorkerInfo> info_;
  std::string down_reason_ = "not checked yet";
  bool predictable_ = false;
  std::unique_ptr<events::KvEventSubscriber> subscriber_;
  std::string subscribed_endpoint_;
  int64_t pending_prefill_tokens_ = 0, active_blocks_ = 0, in_flight_ = 0;
  WorkerCounters counters_;
};

}  // namespace pagoda::router
