// decode_batch (event_codec.h): msgpack -> KvEventBatch, tolerant of every encoding in the wild.
#include <msgpack.hpp>

#include <limits>
#include <string_view>

#include "events/event_codec.h"

namespace pagoda::events {

namespace {

using msgpack::object;
namespace mt = msgpack::type;

Status malformed(const std::string& what) { return Status::invalid_argument("KV event batch: " + what); }

bool is_int(const object& o) { return o.type == mt::POSITIVE_INTEGER || o.type == mt::NEGATIVE_INTEGER; }
bool is_text(const object& o) { return o.type == mt::STR; }
std::string_view text(const object& o) { return {o.via.str.ptr, o.via.str.size}; }

Result<int64_t> to_int(const object& o, const char* field) {
  if (o.type == mt::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type == mt::POSITIVE_INTEGER && o.via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(o.via.u64);
  }
  return malformed(std::string(field) + " must be an integer");
}

// A hash as unsigned, signed (two's complement) or bytes (low 64 bits, big-endian).
Result<uint64_t> to_hash(const object& o) {
  if (o.type == mt::POSITIVE_INTEGER) return o.via.u64;
  if (o.type == mt::NEGATIVE_INTEGER) return static_cast<uint64_t>(o.via.i64);
  if (o.type == mt::BIN || o.type == mt::STR) {
    const char* p = o.type == mt::BIN ? o.via.bin.ptr : o.via.str.ptr;
    const uint32_t n = o.type == mt::BIN ? o.via.bin.size : o.via.str.size;
    if (n == 0) return malformed("an empty block hash");
    uint64_t h = 0;
    for (uint32_t i = n > 8 ? n - 8 : 0; i < n; ++i) h = (h << 8) | static_cast<uint8_t>(p[i]);
    return h;
  }
  return malformed("a block hash must be an integer or bytes");
}

Status read_hashes(const object& o, std::vector<uint64_t>& out) {
  if (o.type != mt::ARRAY) return malformed("block_hashes must be an array");
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    PAGODA_ASSIGN_OR_RETURN(uint64_t h, to_hash(o.via.array.ptr[i]));
    out.push_back(h);
  }
  return Status::ok();
}

Status read_tokens(const object& o, std::vector<int32_t>& out) {
  if (o.type != mt::ARRAY) return malformed("token_ids must be an array");
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const object& t = o.via.array.ptr[i];
    if (!is_int(t)) return malformed("token_ids must be integers");
    PAGODA_ASSIGN_OR_RETURN(int64_t v, to_int(t, "token_ids"));
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return malformed("a token id out of the 32-bit range");
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return Status::ok();
}

// extra_keys: null, or one entry per block (null, or a tuple whose first item may be our salt key).
Status read_extra_keys(const object& o, KvEvent& e) {
  if (o.type == mt::NIL) return Status::ok();
  if (o.type != mt::ARRAY) return malformed("extra_keys must be an array or null");
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const object& entry = o.via.array.ptr[i];
    uint64_t key = 0;
    if (entry.type == mt::ARRAY && entry.via.array.size > 0 && entry.via.array.ptr[0].type == mt::POSITIVE_INTEGER) {
      key = entry.via.array.ptr[0].via.u64;
    }
    e.extra_keys.push_back(key);
  }
  return Status::ok();
}

Status read_optional_hash(const object& o, std::optional<uint64_t>& out) {
  if (o.type == mt::NIL) return Status::ok();
  PAGODA_ASSIGN_OR_RETURN(uint64_t h, to_hash(o));
  out = h;
  return Status::ok();
}

Status read_optional_int(const object& o, const char* field, std::optional<int64_t>& out) {
  if (o.type == mt::NIL) return Status::ok();
  PAGODA_ASSIGN_OR_RETURN(int64_t v, to_int(o, field));
  out = v;
  return Status::ok();
}

Status read_optional_text(const object& o, const char* field, std::optional<std::string>& out) {
  if (o.type == mt::NIL) return Status::ok();
  if (!is_text(o)) return malformed(std::string(field) + " must be a string or null");
  out = std::string(text(o));
  return Status::ok();
}

// The field `name` of event type `type` from value `v` (unknown names are skipped).
Status read_field(KvEvent& e, std::string_view name, const object& v) {
  const bool stored = e.type == KvEventType::kBlockStored;
  if (name == "block_hashes") return read_hashes(v, e.block_hashes);
  if (name == "medium") return read_optional_text(v, "medium", e.medium);
  if (name == "group_idx") return read_optional_int(v, "group_idx", e.group_idx);
  if (!stored) return Status::ok();
  if (name == "parent_block_hash") return read_optional_hash(v, e.parent_block_hash);
  if (name == "token_ids") return read_tokens(v, e.token_ids);
  if (name == "block_size") {
    PAGODA_ASSIGN_OR_RETURN(e.block_size, to_int(v, "block_size"));
    return Status::ok();
  }
  if (name == "lora_id") return read_optional_int(v, "lora_id", e.lora_id);
  if (name == "lora_name") return read_optional_text(v, "lora_name", e.lora_name);
  if (name == "extra_keys") return read_extra_keys(v, e);
  return Status::ok();
}

std::optional<KvEventType> type_of(std::string_view tag) {
  if (tag == "BlockStored") return KvEventType::kBlockStored;
  if (tag == "BlockRemoved") return KvEventType::kBlockRemoved;
  if (tag == "AllBlocksCleared") return KvEventType::kAllBlocksCleared;
  return std::nullopt;
}

// The legacy positional layout after the tag.
constexpr std::string_view kStoredFields[] = {"block_hashes", "parent_block_hash", "token_ids", "block_size",
                                              "lora_id",      "medium",            "lora_name", "extra_keys",
                                              "group_idx"};
constexpr std::string_view kRemovedFields[] = {"block_hashes", "medium", "group_idx"};

// Decodes one event; nullopt for an unknown type.
Result<std::optional<KvEvent>> decode_event(const object& o) {
  KvEvent e;
  if (o.type == mt::MAP) {
    const msgpack::object_kv* kv = o.via.map.ptr;
    const object* tag = nullptr;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      if (is_text(kv[i].key) && text(kv[i].key) == "type") tag = &kv[i].val;
    }
    if (tag == nullptr || !is_text(*tag)) return malformed("an event map without a \"type\" string");
    const auto type = type_of(text(*tag));
    if (!type) return std::optional<KvEvent>();
    e.type = *type;
    bool has_hashes = false;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      if (!is_text(kv[i].key)) continue;
      const std::string_view name = text(kv[i].key);
      has_hashes = has_hashes || name == "block_hashes";
      PAGODA_RETURN_IF_ERROR(read_field(e, name, kv[i].val));
    }
    if (!has_hashes && e.type != KvEventType::kAllBlocksCleared) return malformed("an event without block_hashes");
    return std::optional<KvEvent>(std::move(e));
  }
  if (o.type != mt::ARRAY || o.via.array.size == 0 || !is_text(o.via.array.ptr[0])) {
    return malformed("an event must be a map or a tag-first array");
  }
  const auto type = type_of(text(o.via.array.ptr[0]));
  if (!type) return std::optional<KvEvent>();
  e.type = *type;
  std::span<const std::string_view> layout;
  if (e.type == KvEventType::kBlockStored) layout = kStoredFields;
  if (e.type == KvEventType::kBlockRemoved) layout = kRemovedFields;
  if (e.type != KvEventType::kAllBlocksCleared && o.via.array.size < 2) return malformed("an event without block_hashes");
  for (uint32_t i = 1; i < o.via.array.size && i - 1 < layout.size(); ++i) {
    PAGODA_RETURN_IF_ERROR(read_field(e, layout[i - 1], o.via.array.ptr[i]));
  }
  return std::optional<KvEvent>(std::move(e));
}

// Bounds on what a hostile payload can make the unpacker allocate.
msgpack::unpack_limit limits() {
  return msgpack::unpack_limit(/*array=*/1u << 22, /*map=*/1u << 10, /*str=*/1u << 16, /*bin=*/1u << 16,
                               /*ext=*/0, /*depth=*/8);
}

}  // namespace

Result<KvEventBatch> decode_batch(std::span<const uint8_t> payload, DecodeInfo* info) {
  msgpack::object_handle handle;
  try {
    size_t offset = 0;
    handle = msgpack::unpack(reinterpret_cast<const char*>(payload.data()), payload.size(), offset, nullptr, nullptr,
                             limits());
    if (offset != payload.size()) return malformed("trailing bytes after the batch");
  } catch (const std::exception& e) {
    return malformed(std::string("not msgpack: ") + e.what());
  }
  const object& root = handle.get();
  if (root.type != mt::ARRAY || root.via.array.size < 2) return malformed("must be an array [ts, events, ...]");
  const object& ts = root.via.array.ptr[0];
  const object& events = root.via.array.ptr[1];
  KvEventBatch batch;
  if (ts.type == mt::FLOAT64 || ts.type == mt::FLOAT32) {
    batch.ts = ts.via.f64;
  } else if (is_int(ts)) {
    batch.ts = ts.type == mt::POSITIVE_INTEGER ? static_cast<double>(ts.via.u64) : static_cast<double>(ts.via.i64);
  } else {
    return malformed("the timestamp must be a number");
  }
  if (events.type != mt::ARRAY) return malformed("events must be an array");
  if (root.via.array.size >= 3) {
    PAGODA_RETURN_IF_ERROR(read_optional_int(root.via.array.ptr[2], "data_parallel_rank", batch.data_parallel_rank));
  }
  batch.events.reserve(events.via.array.size);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    PAGODA_ASSIGN_OR_RETURN(std::optional<KvEvent> e, decode_event(events.via.array.ptr[i]));
    if (e) {
      batch.events.push_back(std::move(*e));
    } else if (info != nullptr) {
      ++info->unknown_events;
    }
  }
  return batch;
}

}  // namespace pagoda::events
