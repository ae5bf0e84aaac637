// BlockEventListener: what the block manager tells the rest of the system about its prefix
// index, so that tiers (write-back on eviction, write-through on commit) and KV events
// (events module, vLLM's BlockStored / BlockRemoved) follow the pool without polling it.
//
// TierEventListener: the same for the tiers below the pool (kvcache/tier.h), told by whatever
// drives the tiers (the tier stack): a tier now holds blocks (a put completed; `block` is -1)
// or dropped them (evicted, erased, found corrupt). `medium` is Tier::medium() ("CPU", "DISK",
// "REDIS"). KV events publish both (vLLM's `medium` field; the pool itself is "GPU").
//
// Calls are synchronous, on the thread that drives the BlockManager (the step thread), and
// must not block or call back into the manager.
//   on_blocks_stored: after commit() (or an import of loaded blocks) registered new full
//     blocks: one call per sequence and commit, a chain of consecutive blocks root-most first;
//     chain[0].parent_hash is the hash of the block before it (kRootBlockHash at the root).
//   on_block_evicted: a cached block is being evicted: its hash is dropped and the block freed
//     right after the call returns; its KV bytes are intact during the call (write-back copies
//     them now, e.g. through BlockPool::block_segments).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kvcache/block_hash.h"

namespace pagoda::kvcache {

struct BlockInfo {
  int32_t block = -1;                // pool block id
  BlockHash hash = 0;
  BlockHash parent_hash = kRootBlockHash;
  std::span<const int32_t> tokens;   // [block_size], valid during the call
  KvNamespace ns;
  int32_t priority = 0;              // max priority of the sequences that held it
};

class BlockEventListener {
 public:
  virtual ~BlockEventListener() = default;
  virtual void on_blocks_stored(std::span<const BlockInfo> chain) = 0;
  virtual void on_block_evicted(const BlockInfo& block) = 0;
};

class TierEventListener {
 public:
  virtual ~TierEventListener() = default;
  virtual void on_tier_stored(std::string_view medium, std::span<const BlockInfo> blocks) = 0;
  virtual void on_tier_removed(std::string_view medium, std::span<const BlockHash> hashes) = 0;
};

}  // namespace pagoda::kvcache
