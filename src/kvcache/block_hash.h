// Block identity for prefix caching (DESIGN.md §2).
//
// A full block i of a sequence is named by a chained hash
//   hash_i = H(hash_{i-1}, token ids of block i, namespace key),   hash_{-1} = kRootBlockHash
// so a block's hash covers every token before it. The namespace keeps caches apart that must
// never share KV: the model fingerprint, the KV format (dtype + layout) and the cache salt
// (tenant). H is xxHash64 (implemented here; no external dependency), or, as a choice
// (BlockHashScheme::kSha256, `--kv-hash sha256`), SHA-256 (OpenSSL) truncated to 64 bits, as
// vLLM and TensorRT-LLM offer for caches shared by tenants who should not be able to compute
// another's block names (xxHash is not built to resist crafted inputs).
//
// A hash only *proposes* a hit: the prefix index keeps each cached block's tokens, its parent
// and its namespace and confirms all three, so a collision costs a miss, never wrong KV.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

// The same chain with SHA-256: the first 8 bytes (little-endian) of
// SHA-256(parent LE64 || namespace_key LE64 || token ids LE32 ...). (block_hash_sha256.cpp)
BlockHash hash_block_sha256(BlockHash parent, std::span<const int32_t> tokens, uint64_t namespace_key);

// How an instance names its blocks; every instance, tier and router that shares blocks must use
// the same scheme (a worker advertises it, see server/kv_events_routes.cpp).
enum class BlockHashScheme { kXxh64, kSha256 };
BlockHashFn block_hash_fn(BlockHashScheme scheme);
// "pagoda-xxh64-chain-v1", "pagoda-sha256-chain-v1": the name a worker advertises.
std::string_view block_hash_scheme_name(BlockHashScheme scheme);
std::optional<BlockHashScheme> block_hash_scheme_from_name(std::string_view name);
// The flag's spelling: "xxh64", "sha256".
std::optional<BlockHashScheme> block_hash_scheme_from_flag(std::string_view flag);

}  // namespace pagoda::kvcache
