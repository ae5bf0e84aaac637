// Eviction policies: which cached block to drop when the pool has no free block.
//
// The block manager keeps a policy's candidate set equal to the *evictable* blocks: cached
// (ref 0, hash kept), not pinned by a prefix match, and a leaf of the prefix index (all its
// children gone), so a cached prefix is never cut off from the root. A block enters the set
// with a snapshot of its usage and leaves it when hit, pinned, given a child, or evicted.
//
//   kLru       least recently used first (last_access ascending)
//   kLfu       least frequently used first (num_accesses ascending), ties by LRU
//   kPriority  lowest priority first (a block's priority is the max priority of the
//              sequences that held it), ties by LRU
// Remaining ties go to the lower block id, so every order is deterministic. Time is a
// logical counter supplied by the caller (the block manager ticks it per block event), never
// a wall clock.
//
// All three are one indexed binary heap over block ids, sized once: add, remove and pick are
// O(log n) and never allocate.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace pagoda::kvcache {

enum class EvictionPolicyKind : uint8_t { kLru, kLfu, kPriority };

std::string_view eviction_policy_name(EvictionPolicyKind kind);  // "lru", "lfu", "priority"
std::optional<EvictionPolicyKind> eviction_policy_from_name(std::string_view name);

// What the block manager knows about a block's use since it was last allocated.
struct BlockUsage {
  uint64_t last_access = 0;   // logical time of the last acquire or release
  uint64_t num_accesses = 0;  // acquisitions by sequences (allocate, hit, fork)
  int32_t priority = 0;       // max priority of the sequences that held it
};

// Logical time for eviction: a counter advanced once per block event. The owner of a block
// manager may inject one (tests drive it; several managers may share one order).
class LogicalClock {
 public:
  uint64_t now() const { return now_; }
  uint64_t tick() { return ++now_; }

 private:
  uint64_t now_ = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual EvictionPolicyKind kind() const = 0;

  // Makes `block` a candidate. Precondition: !contains(block).
  virtual void add(int32_t block, const BlockUsage& usage) = 0;
  // Drops a candidate. Precondition: contains(block).
  virtual void remove(int32_t block) = 0;
  virtual bool contains(int32_t block) const = 0;
  // The next block to evict, without removing it; nullopt when there is no candidate.
  virtual std::optional<int32_t> victim() const = 0;
  virtual int64_t size() const = 0;
};

// A policy for block ids in [0, num_blocks).
std::unique_ptr<EvictionPolicy> make_eviction_policy(EvictionPolicyKind kind, int64_t num_blocks);

}  // namespace pagoda::kvcache
