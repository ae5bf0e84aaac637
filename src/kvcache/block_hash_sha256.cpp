// SHA-256 block hashes (block_hash.h) and the scheme table.
// The SHA256_Init/Update/Final interface (deprecated in OpenSSL 3 for EVP, kept available): it
// hashes from the caller's stack with no allocation, which the step loop requires.
#define OPENSSL_API_COMPAT 0x10100000L
#include <openssl/sha.h>

#include <cstring>

#include "kvcache/block_hash.h"

namespace pagoda::kvcache {

BlockHash hash_block_sha256(BlockHash parent, std::span<const int32_t> tokens, uint64_t namespace_key) {
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  uint8_t head[16];
  std::memcpy(head, &parent, 8);  // little-endian hosts only (x86-64, aarch64)
  std::memcpy(head + 8, &namespace_key, 8);
  SHA256_Update(&ctx, head, sizeof(head));
  SHA256_Update(&ctx, tokens.data(), tokens.size_bytes());
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &ctx);
  BlockHash h;
  std::memcpy(&h, digest, 8);
  return h;
}

BlockHashFn block_hash_fn(BlockHashScheme scheme) {
  return scheme == BlockHashScheme::kSha256 ? &hash_block_sha256 : &hash_block;
}

std::string_view block_hash_scheme_name(BlockHashScheme scheme) {
  return scheme == BlockHashScheme::kSha256 ? "pagoda-sha256-chain-v1" : "pagoda-xxh64-chain-v1";
}

std::optional<BlockHashScheme> block_hash_scheme_from_name(std::string_view name) {
  for (BlockHashScheme s : {BlockHashScheme::kXxh64, BlockHashScheme::kSha256}) {
    if (name == block_hash_scheme_name(s)) return s;
  }
  return std::nullopt;
}

std::optional<BlockHashScheme> block_hash_scheme_from_flag(std::string_view flag) {
  if (flag == "xxh64") return BlockHashScheme::kXxh64;
  if (flag == "sha256") return BlockHashScheme::kSha256;
  return std::nullopt;
}

}  // namespace pagoda::kvcache
