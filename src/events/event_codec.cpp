#include "events/event_codec.h"

#include <msgpack.hpp>

#include <limits>
#include <string_view>

namespace pagoda::events {

const char* kv_event_type_name(KvEventType type) {
  switch (type) {
    case KvEventType::kBlockStored: return "BlockStored";
    case KvEventType::kBlockRemoved: return "BlockRemoved";
    case KvEventType::kAllBlocksCleared: return "AllBlocksCleared";
  }
  return "?";
}

namespace {

// msgpack-cxx's packer writes into anything with write(const char*, size_t).
struct StringSink {
  std::string* out;
  void write(const char* data, size_t size) { out->append(data, size); }
};
using Packer = msgpack::packer<StringSink>;

void pack_text(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

template <class T>
void pack_optional(Packer& pk, const std::optional<T>& v) {
  if (!v) {
    pk.pack_nil();
  } else if constexpr (std::is_same_v<T, std::string>) {
    pack_text(pk, *v);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    pk.pack_uint64(*v);
  } else {
    pk.pack_int64(*v);
  }
}

void pack_hashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

void pack_extra_keys(Packer& pk, const std::vector<uint64_t>& keys) {
  pk.pack_array(static_cast<uint32_t>(keys.size()));
  for (uint64_t k : keys) {
    if (k == 0) {
      pk.pack_nil();
    } else {
      pk.pack_array(1);
      pk.pack_uint64(k);
    }
  }
}

// One field of a map-encoded event: its key, then its value.
void key(Packer& pk, std::string_view name) { pack_text(pk, name); }

void pack_event_map(Packer& pk, const KvEvent& e) {
  const bool extra = !e.extra_keys.empty(), group = e.group_idx.has_value();
  switch (e.type) {
    case KvEventType::kBlockStored:
      pk.pack_map(8 + (extra ? 1 : 0) + (group ? 1 : 0));
      key(pk, "type"), pack_text(pk, "BlockStored");
      key(pk, "block_hashes"), pack_hashes(pk, e.block_hashes);
      key(pk, "parent_block_hash"), pack_optional(pk, e.parent_block_hash);
      key(pk, "token_ids"), pk.pack(e.token_ids);
      key(pk, "block_size"), pk.pack_int64(e.block_size);
      key(pk, "lora_id"), pack_optional(pk, e.lora_id);
      key(pk, "medium"), pack_optional(pk, e.medium);
      key(pk, "lora_name"), pack_optional(pk, e.lora_name);
      if (extra) key(pk, "extra_keys"), pack_extra_keys(pk, e.extra_keys);
      if (group) key(pk, "group_idx"), pk.pack_int64(*e.group_idx);
      return;
    case KvEventType::kBlockRemoved:
      pk.pack_map(3 + (group ? 1 : 0));
      key(pk, "type"), pack_text(pk, "BlockRemoved");
      key(pk, "block_hashes"), pack_hashes(pk, e.block_hashes);
      key(pk, "medium"), pack_optional(pk, e.medium);
      if (group) key(pk, "group_idx"), pk.pack_int64(*e.group_idx);
      return;
    case KvEventType::kAllBlocksCleared:
      pk.pack_map(1);
      key(pk, "type"), pack_text(pk, "AllBlocksCleared");
      return;
  }
}

void pack_event_array(Packer& pk, const KvEvent& e) {
  const bool extra = !e.extra_keys.empty(), group = e.group_idx.has_value();
  switch (e.type) {
    case KvEventType::kBlockStored:
      pk.pack_array(8 + (group ? 2 : extra ? 1 : 0));  // trailing defaults omitted
      pack_text(pk, "BlockStored");
      pack_hashes(pk, e.block_hashes);
      pack_optional(pk, e.parent_block_hash);
      pk.pack(e.token_ids);
      pk.pack_int64(e.block_size);
      pack_optional(pk, e.lora_id);
      pack_optional(pk, e.medium);
      pack_optional(pk, e.lora_name);
      if (extra) {
        pack_extra_keys(pk, e.extra_keys);
      } else if (group) {
        pk.pack_nil();
      }
      if (group) pk.pack_int64(*e.group_idx);
      return;
    case KvEventType::kBlockRemoved:
      pk.pack_array(3 + (group ? 1 : 0));
      pack_text(pk, "BlockRemoved");
      pack_hashes(pk, e.block_hashes);
      pack_optional(pk, e.medium);
      if (group) pk.pack_int64(*e.group_idx);
      return;
    case KvEventType::kAllBlocksCleared:
      pk.pack_array(1);
      pack_text(pk, "AllBlocksCleared");
      return;
  }
}

}  // namespace

void encode_batch(const KvEventBatch& batch, EventEncoding encoding, std::string& out) {
  StringSink sink{&out};
  Packer pk(sink);
  pk.pack_array(batch.data_parallel_rank ? 3 : 2);
  pk.pack_double(batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& e : batch.events) {
    if (encoding == EventEncoding::kMap) {
      pack_event_map(pk, e);
    } else {
      pack_event_array(pk, e);
    }
  }
  if (batch.data_parallel_rank) pk.pack_int64(*batch.data_parallel_rank);
}

std::string encode_batch(const KvEventBatch& batch, EventEncoding encoding) {
  std::string out;
  encode_batch(batch, encoding, out);
  return out;
}

}  // namespace pagoda::events
