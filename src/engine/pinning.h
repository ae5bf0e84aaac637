// Pinning prompt prefixes in the block pool (POST /v1/cache/pin, `pagoda serve --pin-prompt`).
//
// pin(): the prompt is computed like a completion's (prefix-cache hits first, then prefill in
// chunks beside other requests), no token is generated, and when its KV is written its full
// blocks are pinned (kvcache/cache_pins.h): never evicted until unpinned or expired. A later
// request whose prompt starts with it reports those tokens as cached_tokens.
//
// Bound: pins hold at most max_pinned_share of the pool's blocks (distinct blocks; pins of a
// shared prefix share them). A pin beyond it is refused (kResourceExhausted, nothing pinned).
// While pins hold blocks, a new request may use only the unpinned rest of the pool: longer
// ones are refused at submit (kTooLarge), and a waiting request that can no longer fit even
// alone (pins taken after it was queued) is ended with kTooLarge rather than waiting forever.
//
// Expiry: ttl_s > 0 expires the pin ttl_s after it was made (or last re-pinned), by the
// engine's Clock, checked each step and before every listing (so an idle server drops it at
// the next request or listing at the latest). Pinning the same prompt and salt again refreshes
// its expiry and keeps its id.
//
// Threads: every call is thread-safe; pin() never blocks (the observer is called on the loop
// thread, at most once); pins()/unpin() run on the loop thread between two steps and wait.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda::engine {

struct PinRequest {
  std::vector<int32_t> prompt;   // token ids, BOS included if wanted
  std::string cache_salt;        // the engine's salt (the server's tenant salt)
  std::string client_salt;       // the salt as the client sent it (shown; cache_salt may carry a tenant prefix)
  double ttl_s = 0;              // 0: until unpinned
  std::string owner;             // opaque tag kept with the pin (the server: the tenant)
  std::string label;             // shown in listings
  int32_t priority = 0;          // of its prefill
};

struct PinInfo {
  int64_t id = 0;
  int64_t prompt_tokens = 0;
  int64_t pinned_tokens = 0;     // full blocks of the prompt: num_blocks x block_size
  std::vector<int32_t> blocks;   // pool block ids, root first
  std::string cache_salt, client_salt, owner, label;
  double ttl_s = 0;              // 0: no expiry
  double age_s = 0;              // since pinned (or last re-pinned)
  double expires_in_s = -1;      // -1: no expiry
  bool refreshed = false;        // pin(): an existing pin of the same prompt was refreshed
  uint64_t last_block_hash = 0;  // chained hash of its last pinned block
};

struct PinStats {
  int64_t pins = 0;
  int64_t pinned_blocks = 0;     // distinct
  int64_t max_pinned_blocks = 0;
  int64_t expired = 0;           // pins dropped by their ttl, since start
};

class PinObserver {
 public:
  virtual ~PinObserver() = default;
  // Once: ok with the pin, or why it failed (kResourceExhausted over the bound, kAborted,
  // kUnavailable at shutdown, kTooLarge when it can never fit, ...).
  virtual void on_pinned(const Status& status, const PinInfo& pin) = 0;
};

class CachePinner {
 public:
  virtual ~CachePinner() = default;
  // Validates and queues. Errors (no observer call then): kInvalidArgument (empty prompt, ids
  // out of range, no full block, bad ttl, prefix caching off, pinning off), kTooLarge (the
  // prompt does not fit), kResourceExhausted (its blocks alone exceed the bound),
  // kUnavailable (queue full, shutting down).
  virtual Status pin(PinRequest request, std::shared_ptr<PinObserver> observer) = 0;
  // kNotFound when no pin has that id (or that prompt under that salt).
  virtual Result<PinInfo> unpin(int64_t id) = 0;
  virtual Result<PinInfo> unpin(const std::vector<int32_t>& prompt, const std::string& cache_salt) = 0;
  // Every live pin (expired ones dropped first), by id.
  virtual std::vector<PinInfo> pins() = 0;
  virtual PinStats pin_stats() = 0;
};

// pin() and wait for the observer (not on the loop thread, which must be running).
Result<PinInfo> pin_and_wait(CachePinner& pinner, PinRequest request);

}  // namespace pagoda::engine
