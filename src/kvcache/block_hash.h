// Block identity for prefix caching (DESIGN.md §2).
//
// A full block i of a sequence is named by a chained hash
//   hash_i = H(hash_{i-1}, token ids of block i, namespace key),   hash_{-1} = kRootBlockHash
// so a block's hash covers every token before it. The namespace keeps caches apart that must
// never share KV: the model fingerprint, the KV format (dtype + layout) and the cache salt
// (tenant). H is xxHash64 (implemented here; no external dependency).
//
// A hash only *proposes* a hit: the prefix index keeps each cached block's tokens, its parent
// and its namespace and confirms all three, so a collision costs a miss, never wrong KV.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace pagoda::kvcache {

using BlockHash = uint64_t;
inline constexpr BlockHash kRootBlockHash = 0;

// What a cached block is valid for. Every field is opaque to kvcache; callers derive them
// e.g. with hash_string(model file digest), hash_string("f16/nd"), hash_string(tenant salt).
struct KvNamespace {
  uint64_t model_fingerprint = 0;
  uint64_t kv_format = 0;
  uint64_t cache_salt = 0;

  // The 64-bit mix of all three fields that enters every block hash.
  uint64_t key() const;
  bool operator==(const KvNamespace&) const = default;
};

// xxHash64 of `size` bytes (the reference algorithm; identical output to XXH64()).
uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t hash_string(std::string_view text, uint64_t seed = 0) {
  return xxhash64(text.data(), text.size(), seed);
}

// KvNamespace::cache_salt of a request's cache salt (a tenant); "" -> 0, no salt. Every
// instance and the router derive it alike, so salted blocks hash the same everywhere.
inline uint64_t cache_salt_key(std::string_view cache_salt) {
  return cache_salt.empty() ? 0 : hash_string(cache_salt, 0x5a17);
}

// hash_i from hash_{i-1}, the block's token ids and KvNamespace::key().
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens, uint64_t namespace_key);

// The block hash function, injectable so tests can force collisions.
using BlockHashFn = BlockHash (*)(BlockHash parent, std::span<const int32_t> tokens, uint64_t namespace_key);

}  // namespace pagoda::kvcache
