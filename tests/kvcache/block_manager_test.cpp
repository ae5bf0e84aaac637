#include "kvcache/block_manager.h"

#include <gtest/gtest.h>

#include <map>

#include "core/rng.h"

namespace pagoda::kvcache {
namespace {

KvLayout small_layout(int64_t block_size) {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 2;
  l.head_dim = 4;
  l.block_size = block_size;
  return l;
}

TEST(KvLayout, SizingArithmetic) {
  KvLayout l;
  l.n_layer = 32;
  l.n_kv_head = 8;
  l.head_dim = 128;
  l.dtype = DType::kF16;
  EXPECT_EQ(l.bytes_per_token(), 131072);  // Llama-3-8B in f16
  l.block_size = 16;
  EXPECT_EQ(l.bytes_per_block(), 131072 * 16);
  auto plan = plan_kv_pool(l, int64_t{1} << 30);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->num_blocks, 512);
  EXPECT_EQ(plan->token_capacity, 8192);
  EXPECT_FALSE(plan_kv_pool(l, 1000).is_ok());
  EXPECT_EQ(*parse_bytes("512M"), 512ll << 20);
  EXPECT_EQ(*parse_bytes("1.5GiB"), 3ll << 29);
  EXPECT_FALSE(parse_bytes("lots").is_ok());
  EXPECT_FALSE(parse_bytes("12XB").is_ok());
}

TEST(BlockManager, SlotsFollowTheBlockTable) {
  auto pool = BlockPool::create(small_layout(4), 8);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  SeqId a = m.add_sequence(32);
  std::vector<int64_t> slots(10);
  EXPECT_EQ(m.blocks_needed(a, 10), 3);
  ASSERT_TRUE(m.append(a, 10, slots));
  const auto& table = m.block_table(a);
  ASSERT_EQ(table.size(), 3u);
  for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(slots[p], table[p / 4] * 4 + p % 4);
  EXPECT_EQ(m.blocks_needed(a, 2), 0);  // fits in the partly filled last block
  EXPECT_EQ(m.blocks_needed(a, 3), 1);
  SeqId b = m.add_sequence(32);
  std::vector<int64_t> big(21);
  EXPECT_FALSE(m.append(b, 21, big));  // needs 6, 5 free: nothing changes
  EXPECT_EQ(m.length(b), 0);
  EXPECT_EQ(pool->num_free(), 5);
  m.check_integrity();
  m.truncate(a, 5);
  EXPECT_EQ(m.block_table(a).size(), 2u);
  m.free_sequence(a);
  m.free_sequence(b);
  EXPECT_EQ(pool->num_free(), 8);
  m.check_integrity();
}

TEST(BlockManager, RandomOperationsKeepIntegrity) {
  Rng rng(2024);
  for (int64_t block_size : {1, 3, 16}) {
    auto pool = BlockPool::create(small_layout(block_size), 40);
    ASSERT_TRUE(pool.is_ok());
    BlockManager m(*pool);
    std::map<SeqId, int64_t> lengths;  // the expected state
    std::vector<int64_t> slots(64);
    for (int step = 0; step < 3000; ++step) {
      const uint64_t op = rng.next_u64() % 10;
      if (op < 2 || lengths.empty()) {
        lengths[m.add_sequence(256)] = 0;
      } else {
        auto it = lengths.begin();
        std::advance(it, rng.next_u64() % lengths.size());
        if (op < 7) {
          const int64_t n = static_cast<int64_t>(rng.next_u64() % 20);
          const int64_t need = (it->second + n + block_size - 1) / block_size - (it->second + block_size - 1) / block_size;
          const bool ok = m.append(it->first, n, slots);
          EXPECT_EQ(ok, need <= pool->num_free() + (ok ? need : 0));
          if (ok) it->second += n;
        } else if (op < 8) {
          const int64_t keep = it->second ? static_cast<int64_t>(rng.next_u64() % (it->second + 1)) : 0;
          m.truncate(it->first, keep);
          it->second = keep;
        } else {
          m.free_sequence(it->first);
          lengths.erase(it);
        }
      }
      int64_t blocks = 0;
      for (const auto& [id, len] : lengths) {
        ASSERT_EQ(m.length(id), len);
        blocks += (len + block_size - 1) / block_size;
      }
      ASSERT_EQ(pool->num_in_use(), blocks);
      m.check_integrity();
    }
  }
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  auto pool = BlockPool::create(small_layout(4), 2);
  ASSERT_TRUE(pool.is_ok());
  int32_t id = *pool->allocate();
  pool->unref(id);
  EXPECT_DEATH(pool->unref(id), "released twice");
}

}  // namespace
}  // namespace pagoda::kvcache
