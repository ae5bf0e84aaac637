#include "kvcache/block_hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace pagoda::kvcache {
namespace {

TEST(BlockHash, MatchesReferenceXxHash64) {
  // Reference values from libxxhash 0.8 (XXH64).
  EXPECT_EQ(hash_string(""), 0xef46db3751d8e999ull);
  EXPECT_EQ(hash_string("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(hash_string("abc"), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(hash_string("Nobody inspects the spammish repetition"), 0xfbcea83c8a378bf1ull);
  EXPECT_EQ(hash_string("Nobody inspects the spammish repetition", 123), 0xa8ba45551f24b7aeull);
  std::vector<uint8_t> bytes(100);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(xxhash64(bytes.data(), bytes.size(), 0x9E3779B97F4A7C15ull), 0x3b97d91eba03e785ull);
}

TEST(BlockHash, ChainsParentTokensAndNamespace) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const KvNamespace a{1, 2, 3};
  KvNamespace b = a;
  b.cache_salt = 4;
  const BlockHash h = hash_block(kRootBlockHash, tokens, a.key());
  EXPECT_EQ(h, hash_block(kRootBlockHash, tokens, a.key()));  // deterministic
  EXPECT_NE(h, hash_block(kRootBlockHash, tokens, b.key()));  // salt
  EXPECT_NE(h, hash_block(h, tokens, a.key()));               // parent
  const std::vector<int32_t> other = {1, 2, 4, 3};
  EXPECT_NE(h, hash_block(kRootBlockHash, other, a.key()));   // order of tokens
  EXPECT_NE(a.key(), (KvNamespace{2, 1, 3}.key()));           // fields do not commute
  EXPECT_NE(KvNamespace{}.key(), (KvNamespace{0, 0, 1}.key()));
}

TEST(BlockHash, NoCollisionsAmongManySmallBlocks) {
  std::set<BlockHash> seen;
  const uint64_t ns = KvNamespace{}.key();
  for (int32_t a = 0; a < 64; ++a) {
    for (int32_t b = 0; b < 64; ++b) {
      const int32_t block[2] = {a, b};
      const BlockHash first = hash_block(kRootBlockHash, block, ns);
      EXPECT_TRUE(seen.insert(first).second);
      EXPECT_TRUE(seen.insert(hash_block(first, block, ns)).second);
    }
  }
}

}  // namespace
}  // namespace pagoda::kvcache
