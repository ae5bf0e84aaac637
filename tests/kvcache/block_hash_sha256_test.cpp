// SHA-256 block hashes (--kv-hash sha256) and the scheme names (kvcache/block_hash.h).
#include <gtest/gtest.h>

#include <vector>

#include "kvcache/block_hash.h"

namespace pagoda::kvcache {
namespace {

TEST(BlockHashSha256, MatchesAnIndependentSha256) {
  // Reference: Python's hashlib, sha256(struct.pack('<QQ', parent, key) + tokens as '<i')[:8] as '<Q'.
  EXPECT_EQ(hash_block_sha256(0, {}, 0), 0xd59d71f7ff084737ull);
  const std::vector<int32_t> four = {1, 2, 3, 4};
  EXPECT_EQ(hash_block_sha256(0, four, 0x1234), 0x951e7507e939e424ull);
  std::vector<int32_t> sixteen(16);
  for (int i = 0; i < 16; ++i) sixteen[i] = i;
  EXPECT_EQ(hash_block_sha256(0xdeadbeefcafef00dull, sixteen, 0x1234), 0xe9f936b0d3c77206ull);
}

TEST(BlockHashSha256, ChainsParentTokensAndNamespaceAndDiffersFromXxh64) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const BlockHash h = hash_block_sha256(kRootBlockHash, tokens, 7);
  EXPECT_NE(hash_block_sha256(h, tokens, 7), h);
  EXPECT_NE(hash_block_sha256(kRootBlockHash, tokens, 8), h);
  EXPECT_NE(hash_block_sha256(kRootBlockHash, std::vector<int32_t>{1, 2, 3, 5}, 7), h);
  EXPECT_NE(hash_block(kRootBlockHash, tokens, 7), h);
}

TEST(BlockHashSha256, SchemeNamesAndFlags) {
  for (BlockHashScheme s : {BlockHashScheme::kXxh64, BlockHashScheme::kSha256}) {
    EXPECT_EQ(block_hash_scheme_from_name(block_hash_scheme_name(s)), s);
  }
  EXPECT_EQ(block_hash_scheme_name(BlockHashScheme::kXxh64), "pagoda-xxh64-chain-v1");
  EXPECT_EQ(block_hash_scheme_from_flag("sha256"), BlockHashScheme::kSha256);
  EXPECT_EQ(block_hash_scheme_from_flag("xxh64"), BlockHashScheme::kXxh64);
  EXPECT_FALSE(block_hash_scheme_from_flag("md5"));
  EXPECT_FALSE(block_hash_scheme_from_name("pagoda-md5-chain-v1"));
  EXPECT_EQ(block_hash_fn(BlockHashScheme::kSha256), &hash_block_sha256);
  EXPECT_EQ(block_hash_fn(BlockHashScheme::kXxh64), &hash_block);
}

}  // namespace
}  // namespace pagoda::kvcache
