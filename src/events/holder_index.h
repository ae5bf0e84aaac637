// HolderIndex: which instances hold each block hash, the router's index inverted from block to
// worker. Matching a request's chain against every worker at once costs time in proportion to
// the holders of the chain's blocks (and one pass over a per-worker array), not one hash probe
// per worker: at 1,000 workers that probe was a DRAM miss each, 352 µs per routed request
// (bench/scale_bench, BENCHMARKS.md).
//
// Fed by each worker's BlockIndex (block_index.h): a hash enters with holder w when w first
// holds it in any medium and leaves when w holds it in none. Most hashes have one holder (kept
// inline in `single_`); a hash held by several (a shared system prompt) moves to `multi_`.
//
// Invariant: a hash is in at most one of single_ / multi_; every multi_ entry has >= 2 distinct
// holders. Thread-safe: writers are the workers' event threads, readers the routing threads.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace pagoda::events {

class HolderIndex {
 public:
  // Idempotent: adding a holder twice, or removing one that does not hold the hash, is a no-op.
  void add(uint64_t hash, int32_t holder);
  void remove(uint64_t hash, int32_t holder);

  // For every holder w in [0, matched.size()): matched[w] = how many hashes of `chain`
  // (consecutive blocks, root first) w holds from the first on. Holders outside are ignored.
  void match(std::span<const uint64_t> chain, std::span<int64_t> matched) const;

  int64_t num_hashes() const;                  // distinct hashes held by anyone
  int64_t num_holders(uint64_t hash) const;    // for tests

 private:
  // Calls f(holder) for each holder of hash; the lock is held by the caller.
  template <typename F>
  void for_each_holder_locked(uint64_t hash, F f) const;

  mutable std::shared_mutex mutex_;
  std::unordered_map<uint64_t, int32_t> single_;             // hash -> its only holder
  std::unordered_map<uint64_t, std::vector<int32_t>> multi_;  // hash -> its holders (>= 2)
};

}  // namespace pagoda::events
