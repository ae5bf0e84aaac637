// KV events as vLLM defines them (vllm/distributed/kv_events.py): what a worker's KV cache
// stored and dropped, per medium (the tier: "GPU" for the device pool, as vLLM names it;
// "CPU", "DISK", "REDIS" for the tiers below it), in batches.
//
//   BlockStored       block_hashes (a chain, root-most first), parent_block_hash (the block
//                     before the first; none at the root), token_ids (exactly those blocks'
//                     tokens), block_size, lora_id, medium, lora_name, extra_keys (one entry per
//                     block), group_idx
//   BlockRemoved      block_hashes, medium, group_idx
//   AllBlocksCleared  (no fields): the instance holds nothing (published at start)
//   EventBatch        [timestamp (Unix seconds, float), [events], data_parallel_rank]
//
// Hashes are our chained 64-bit block hashes (kvcache/block_hash.h), integers on the wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::events {

enum class KvEventType : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
const char* kv_event_type_name(KvEventType type);  // "BlockStored", ...

struct KvEvent {
  KvEventType type = KvEventType::kBlockStored;
  std::vector<uint64_t> block_hashes;           // [num_blocks]
  std::optional<uint64_t> parent_block_hash;    // stored: none at the root
  std::vector<int32_t> token_ids;               // stored: [num_blocks * block_size]
  int64_t block_size = 0;                       // stored
  std::optional<int64_t> lora_id;               // stored (always none here)
  std::optional<std::string> medium;            // "GPU", "CPU", "DISK", "REDIS"
  std::optional<std::string> lora_name;         // stored (always none here)
  // stored: one per block; our blocks' only extra key is the tenant's cache-salt key
  // (KvNamespace::cache_salt, 0: none -> the entry is null). Decoded from other engines as
  // "present" only (their entries hold multimodal hashes, LoRA names, salts as text).
  std::vector<uint64_t> extra_keys;
  std::optional<int64_t> group_idx;             // KV cache group (0: the only one here)
  bool operator==(const KvEvent&) const = default;
};

struct KvEventBatch {
  double ts = 0;                                // Unix seconds
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;    // absent in 2-element (older) batches
  bool operator==(const KvEventBatch&) const = default;
};

}  // namespace pagoda::events
