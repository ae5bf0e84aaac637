// Windowed sequences: release_block leaves a hole that free_sequence, truncate and
// check_integrity accept; drop_block removes an entry and shifts later positions down; both
// are refused (CHECK) for cacheable sequences, and uncacheable sequences register nothing.
#include <gtest/gtest.h>

#include <vector>

#include "kvcache/block_manager.h"

namespace pagoda::kvcache {
namespace {

KvLayout layout4() {
  KvLayout l;
  l.n_layer = 1;
  l.n_kv_head = 1;
  l.head_dim = 4;
  l.block_size = 4;
  return l;
}

std::vector<int32_t> iota_tokens(int n, int from = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = from + i;
  return t;
}

TEST(BlockManagerWindow, HolesAreFreedAndAccepted) {
  auto pool = BlockPool::create(layout4(), 8);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  SequenceOptions opts;
  opts.cacheable = false;
  const SeqId s = m.add_sequence(64, opts);
  std::vector<int64_t> slots(14);
  std::vector<BlockCopy> copies;
  const auto tokens = iota_tokens(14);
  ASSERT_TRUE(m.append(s, tokens, slots, copies));
  m.commit(s);
  EXPECT_EQ(m.index().size(), 0) << "uncacheable: nothing registered";
  EXPECT_EQ(pool->num_free(), 4);
  m.release_block(s, 0);
  m.release_block(s, 2);
  m.check_integrity();
  EXPECT_EQ(pool->num_free(), 6);
  EXPECT_EQ(m.block_table(s)[0], -1);
  EXPECT_EQ(m.block_table(s)[2], -1);
  EXPECT_EQ(m.num_held_blocks(s), 2);
  EXPECT_EQ(m.length(s), 14);
  // Appending goes on after the holes; slots come from the last block.
  std::vector<int64_t> more(3);
  const auto next = iota_tokens(3, 14);
  ASSERT_TRUE(m.append(s, next, more, copies));
  m.commit(s);
  EXPECT_EQ(more[0], int64_t{m.block_table(s)[3]} * 4 + 2);
  m.check_integrity();
  m.truncate(s, 6);  // cuts through the hole at 2 without touching it
  m.check_integrity();
  EXPECT_EQ(m.num_held_blocks(s), 1);
  m.free_sequence(s);
  m.check_integrity();
  EXPECT_EQ(pool->num_free(), 8);
}

TEST(BlockManagerWindow, DropBlockShiftsLaterPositions) {
  auto pool = BlockPool::create(layout4(), 8);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  SequenceOptions opts;
  opts.cacheable = false;
  const SeqId s = m.add_sequence(64, opts);
  std::vector<int64_t> slots(13);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.append(s, iota_tokens(13), slots, copies));
  m.commit(s);
  const std::vector<int32_t> before = m.block_table(s);
  m.drop_block(s, 1);
  m.check_integrity();
  EXPECT_EQ(m.length(s), 9);
  EXPECT_EQ(m.num_computed(s), 9);
  EXPECT_EQ(m.block_table(s), (std::vector<int32_t>{before[0], before[2], before[3]}));
  EXPECT_EQ(pool->num_free(), 5);
  std::vector<int64_t> one(1);
  const std::vector<int32_t> t = {99};
  ASSERT_TRUE(m.append(s, t, one, copies));  // position 9: row 1 of the last block
  EXPECT_EQ(one[0], int64_t{before[3]} * 4 + 1);
  m.check_integrity();
}

TEST(BlockManagerWindowDeathTest, CacheableSequencesRefuse) {
  auto pool = BlockPool::create(layout4(), 8);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  const SeqId s = m.add_sequence(64);
  std::vector<int64_t> slots(9);
  ASSERT_TRUE(m.append(s, 9, slots));
  EXPECT_DEATH(m.release_block(s, 0), "cacheable");
  EXPECT_DEATH(m.drop_block(s, 0), "cacheable");
  SequenceOptions opts;
  opts.cacheable = false;
  const SeqId w = m.add_sequence(64, opts);
  ASSERT_TRUE(m.append(w, 9, slots));
  m.commit(w);
  EXPECT_DEATH(m.fork(w), "not cacheable");
  EXPECT_DEATH(m.release_block(w, 2), "release_block");  // the last block
}

}  // namespace
}  // namespace pagoda::kvcache
