// CachePins: long-lived pins of computed prompt prefixes (POST /v1/cache/pin, `pagoda serve
// --pin-prompt`), each with an optional time to live, bounded by a share of the block pool.
//
// A pin owns a PrefixMatch (block_manager.h) of the full blocks of its prompt: while the pin
// lives those blocks are never evicted (pinned blocks leave the eviction candidates, and every
// ancestor of a pinned block is pinned too). Several pins may share blocks (a common system
// prompt); the bound counts distinct blocks.
//
// Pin life:  (prompt prefilled by the engine) --pin--> pinned --unpin | expire | clear--> gone
//            pinned --pin of the same (tokens, namespace)--> pinned (expiry refreshed, same id)
// Time is the caller's (an injected Clock's now_ns): a pin with ttl_ns > 0 expires at
// created + ttl_ns, when the owner calls expire(now) (the serving loop does each step and
// before every listing). Ids are never reused.
//
// Invariants (check_integrity): held_[b] = number of pins whose match holds block b;
// num_pinned_blocks = |{b : held_[b] > 0}| <= max_pinned_blocks; every held block carries at
// least held_[b] block-manager pins (the manager's own check covers states and ancestors).
// Not thread-safe: the thread that drives the BlockManager drives this. Destroy before it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kvcache/block_manager.h"

namespace pagoda::kvcache {

struct CachePin {
  int64_t id = 0;
  std::vector<int32_t> tokens;   // [prompt tokens] as given (the pinned part: match.num_tokens())
  KvNamespace ns;
  std::string cache_salt;        // the salt as the engine hashed it (tenant prefix included)
  std::string client_salt;       // the salt as the client gave it (shown in listings)
  std::string owner;             // opaque to kvcache (the server keeps the API key's tenant here)
  std::string label;             // for listings ("--pin-prompt FILE", or empty)
  PrefixMatch match;             // the pinned full blocks, root first
  int64_t created_ns = 0;
  int64_t ttl_ns = 0;            // 0: until unpinned
  int64_t expires_ns() const { return ttl_ns > 0 ? created_ns + ttl_ns : 0; }
};

struct CachePinSpec {
  std::span<const int32_t> tokens;
  KvNamespace ns;
  std::string cache_salt, client_salt, owner, label;
  int64_t ttl_ns = 0;
};

class CachePins {
 public:
  CachePins(BlockManager& blocks, int64_t max_pinned_blocks);
  CachePins(const CachePins&) = delete;
  CachePins& operator=(const CachePins&) = delete;
  ~CachePins() { clear(); }

  // Pins the cached full blocks of spec.tokens (BlockManager::pin_prefix) at time now_ns.
  // A pin of the same tokens and namespace already there is refreshed (created = now, its
  // ttl replaced) and returned; *refreshed says which. Errors: kNotFound when no full block of
  // the prompt is cached, kResourceExhausted when the distinct pinned blocks would exceed
  // max_pinned_blocks (nothing changes then).
  Result<const CachePin*> pin(const CachePinSpec& spec, int64_t now_ns, bool* refreshed = nullptr);
  // Blocks a pin of `tokens` would add to num_pinned_blocks (full blocks not pinned yet,
  // cached or not): a dry run before computing the prompt.
  int64_t blocks_to_add(std::span<const int32_t> tokens, const KvNamespace& ns) const;
  // Drops the pin; false when no pin has that id.
  bool unpin(int64_t id);
  const CachePin* find(int64_t id) const;
  const CachePin* find(std::span<const int32_t> tokens, const KvNamespace& ns) const;
  // Drops every pin whose expiry is <= now_ns; returns how many.
  int64_t expire(int64_t now_ns);
  void clear();

  const std::vector<std::unique_ptr<CachePin>>& pins() const { return pins_; }  // by id
  int64_t num_pins() const { return static_cast<int64_t>(pins_.size()); }
  int64_t num_pinned_blocks() const { return num_pinned_blocks_; }
  int64_t max_pinned_blocks() const { return max_pinned_blocks_; }
  bool pinned(int32_t block) const { return held_[block] > 0; }
  int64_t num_expired() const { return num_expired_; }  // since creation

  // Aborts unless the invariants at the top hold.
  void check_integrity() const;

 private:
  CachePin* lookup(std::span<const int32_t> tokens, const KvNamespace& ns) const;
  void hold(const PrefixMatch& m, int delta);
  void drop(size_t index);

  BlockManager& blocks_;
  int64_t max_pinned_blocks_;
  std::vector<std::unique_ptr<CachePin>> pins_;  // ascending id
  std::vector<int32_t> held_;                    // [num_blocks] pins holding each block
  int64_t num_pinned_blocks_ = 0;
  int64_t next_id_ = 1;
  int64_t num_expired_ = 0;
  int64_t next_expiry_ns_ = 0;                   // earliest expiry of a pin with a ttl; 0: none
};

}  // namespace pagoda::kvcache
