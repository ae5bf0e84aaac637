// KV event batches <-> msgpack, byte for byte as vLLM's msgspec structs lay them out
// (msgspec omits a field equal to its default; fields without one are always written):
//
//   batch   [ts: float64, [events...], data_parallel_rank: int]   (rank omitted when none)
//   map     {"type": "BlockStored", "block_hashes": [...], "parent_block_hash": h|nil,
//            "token_ids": [...], "block_size": n, "lora_id": nil, "medium": "GPU",
//            "lora_name": nil, "extra_keys": [...] (when any), "group_idx": 0 (when set)}
//           {"type": "BlockRemoved", "block_hashes": [...], "medium": m, "group_idx": 0}
//           {"type": "AllBlocksCleared"}
//   array   (legacy) the same fields in the same order after the tag, trailing defaults omitted:
//           ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, lora_name,
//            extra_keys, group_idx], ["BlockRemoved", hashes, medium, group_idx],
//           ["AllBlocksCleared"]
//   extra_keys: one entry per block, null or [salt key as uint64].
// Integers take msgpack's shortest form (hashes up to uint64), strings str8/16/32 by length.
//
// The decoder is what a tolerant consumer must be: batches of 2 or more elements (extras
// skipped), events as maps (unknown keys skipped, missing optional ones defaulted) or arrays
// (extra trailing fields skipped), hashes as unsigned or signed integers or as bytes (the low
// 64 bits of their big-endian value, as vLLM's int form and llm-d read them), unknown event
// types skipped and counted. Malformed input is an error value, never a crash: sizes and
// nesting are bounded before anything is allocated.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "events/kv_event.h"
#include "events/kv_events_config.h"

namespace pagoda::events {

// Appends the msgpack of `batch` to out.
void encode_batch(const KvEventBatch& batch, EventEncoding encoding, std::string& out);
std::string encode_batch(const KvEventBatch& batch, EventEncoding encoding);

struct DecodeInfo {
  int64_t unknown_events = 0;   // events of a type this decoder does not know (skipped)
};
Result<KvEventBatch> decode_batch(std::span<const uint8_t> payload, DecodeInfo* info = nullptr);
inline Result<KvEventBatch> decode_batch(std::string_view payload, DecodeInfo* info = nullptr) {
  return decode_batch(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()), info);
}

}  // namespace pagoda::events
