#include "kvcache/prefix_index.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagoda::kvcache {
namespace {

constexpr int64_t kBlockSize = 2;

BlockHash constant_hash(BlockHash, std::span<const int32_t>, uint64_t) { return 42; }

// Registers blocks[i] for tokens[2i, 2i+2) as a chain, the way a sequence commits.
void insert_chain(PrefixIndex& index, const std::vector<int32_t>& blocks, const std::vector<int32_t>& tokens,
                  const KvNamespace& ns, BlockHashFn hash_fn = &hash_block) {
  BlockHash hash = kRootBlockHash;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::span<const int32_t> block_tokens(tokens.data() + i * kBlockSize, kBlockSize);
    hash = hash_fn(hash, block_tokens, ns.key());
    index.insert(blocks[i], hash, i ? blocks[i - 1] : PrefixIndex::kRoot, ns, block_tokens);
  }
}

std::vector<int32_t> match(const PrefixIndex& index, const std::vector<int32_t>& tokens, const KvNamespace& ns,
                           BlockHashFn hash_fn = &hash_block, int64_t max_blocks = 100) {
  std::vector<int32_t> chain;
  const int64_t n = index.match(tokens, ns, max_blocks, hash_fn, chain);
  EXPECT_EQ(n, static_cast<int64_t>(chain.size()));
  return chain;
}

TEST(PrefixIndex, MatchesTheLongestRegisteredChain) {
  PrefixIndex index(16, kBlockSize);
  const KvNamespace ns{7, 0, 0};
  insert_chain(index, {3, 5, 9}, {1, 2, 3, 4, 5, 6}, ns);
  insert_chain(index, {4}, {9, 9}, ns);
  index.check_integrity();
  EXPECT_EQ(index.size(), 4);
  EXPECT_EQ(index.num_children(3), 1);
  EXPECT_EQ(index.num_children(9), 0);
  EXPECT_EQ(match(index, {1, 2, 3, 4, 5, 6, 7}, ns), (std::vector<int32_t>{3, 5, 9}));
  EXPECT_EQ(match(index, {1, 2, 3, 4, 0, 0}, ns), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(match(index, {1, 2, 3, 4, 5, 6}, ns, &hash_block, 2), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(match(index, {1, 2, 3}, ns), (std::vector<int32_t>{3}));  // partial block never matches
  EXPECT_TRUE(match(index, {2, 1}, ns).empty());
  EXPECT_TRUE(match(index, {1, 2}, KvNamespace{7, 0, 1}).empty());  // another salt
  index.erase(9);
  EXPECT_EQ(match(index, {1, 2, 3, 4, 5, 6}, ns), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(index.num_children(5), 0);
  index.check_integrity();
}

TEST(PrefixIndex, CollisionsAreConfirmedAgainstTokensAndParents) {
  PrefixIndex index(16, kBlockSize);
  const KvNamespace ns;
  // Every block hashes to 42: only the stored tokens, parent links and namespace tell them apart.
  insert_chain(index, {0, 1}, {1, 1, 2, 2}, ns, &constant_hash);
  insert_chain(index, {2, 3}, {2, 2, 1, 1}, ns, &constant_hash);
  index.check_integrity();
  EXPECT_EQ(match(index, {1, 1, 2, 2}, ns, &constant_hash), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(match(index, {2, 2, 1, 1}, ns, &constant_hash), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(match(index, {1, 1, 1, 1}, ns, &constant_hash), (std::vector<int32_t>{0}));  // 1 is not under 0
  EXPECT_TRUE(match(index, {3, 3}, ns, &constant_hash).empty());
  EXPECT_TRUE(match(index, {1, 1}, KvNamespace{0, 0, 9}, &constant_hash).empty());
}

TEST(PrefixIndex, DuplicatesFollowEveryConfirmedBranch) {
  PrefixIndex index(16, kBlockSize);
  const KvNamespace ns;
  // Two sequences computed the same first block; only the second went on.
  insert_chain(index, {0}, {1, 1}, ns);
  insert_chain(index, {1, 2, 3}, {1, 1, 2, 2, 3, 3}, ns);
  index.check_integrity();
  EXPECT_EQ(match(index, {1, 1, 2, 2, 3, 3}, ns), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(match(index, {1, 1}, ns).size(), 1u);
}

TEST(PrefixIndexDeathTest, OnlyLeavesAreErased) {
  PrefixIndex index(4, kBlockSize);
  insert_chain(index, {0, 1}, {1, 2, 3, 4}, KvNamespace{});
  EXPECT_DEATH(index.erase(0), "inner block");
}

}  // namespace
}  // namespace pagoda::kvcache
