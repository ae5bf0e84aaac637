#include "kvcache/block_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/rng.h"

namespace pagoda::kvcache {
namespace {

KvLayout layout(int64_t n_layer, kernels::KvDType dtype) {
  KvLayout l;
  l.n_layer = n_layer;
  l.n_kv_head = 2;
  l.head_dim = 4;
  l.block_size = 3;
  l.dtype = dtype;
  return l;
}

TEST(BlockPool, StatesFollowRefsAndCacheability) {
  auto pool = BlockPool::create(layout(1, kernels::KvDType::kF32), 3);
  ASSERT_TRUE(pool.is_ok());
  const int32_t a = *pool->allocate();
  const int32_t b = *pool->allocate();
  pool->ref(a);
  pool->set_cacheable(a);
  EXPECT_EQ(pool->unref(a), BlockState::kInUse);
  EXPECT_EQ(pool->unref(a), BlockState::kCached);
  EXPECT_EQ(pool->unref(b), BlockState::kFree);
  EXPECT_EQ(pool->num_cached(), 1);
  EXPECT_EQ(pool->num_free(), 2);
  EXPECT_EQ(pool->num_in_use(), 0);
  pool->check_integrity();
  pool->reuse(a);  // a prefix hit
  EXPECT_EQ(pool->state(a), BlockState::kInUse);
  EXPECT_EQ(pool->unref(a), BlockState::kCached);
  pool->evict(a);
  EXPECT_EQ(pool->state(a), BlockState::kFree);
  EXPECT_FALSE(pool->cacheable(a));
  EXPECT_EQ(pool->num_free(), 3);
  pool->check_integrity();
}

// Every byte of every K/V array: [n_layer][K, V] arrays of num_blocks blocks.
std::vector<std::vector<uint8_t>> snapshot(BlockPool& pool) {
  const KvLayout& l = pool.layout();
  std::vector<std::vector<uint8_t>> arrays;
  for (int64_t layer = 0; layer < l.n_layer; ++layer) {
    const auto view = pool.layer_view(layer);
    const auto* k = static_cast<const uint8_t*>(view.k);
    const auto* v = static_cast<const uint8_t*>(view.v);
    arrays.emplace_back(k, k + l.k_array_bytes(pool.num_blocks()));
    arrays.emplace_back(v, v + l.v_array_bytes(pool.num_blocks()));
  }
  return arrays;
}

TEST(BlockPool, CopyBlockCopiesEveryLayerAndNothingElse) {
  using kernels::KvDType;
  Rng rng(11);
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kInt8}) {
    for (int64_t n_layer : {1, 3}) {
      const int64_t num_blocks = 5;
      auto pool = BlockPool::create(layout(n_layer, dtype), num_blocks);
      ASSERT_TRUE(pool.is_ok());
      for (int64_t layer = 0; layer < n_layer; ++layer) {
        const auto view = pool->layer_view(layer);
        auto* k = static_cast<uint8_t*>(view.k);
        auto* v = static_cast<uint8_t*>(view.v);
        for (int64_t i = 0; i < pool->layout().k_array_bytes(num_blocks); ++i) k[i] = static_cast<uint8_t>(rng.next_u64());
        for (int64_t i = 0; i < pool->layout().v_array_bytes(num_blocks); ++i) v[i] = static_cast<uint8_t>(rng.next_u64());
      }
      const auto before = snapshot(*pool);
      pool->copy_block(3, 1);
      const auto after = snapshot(*pool);
      for (size_t a = 0; a < before.size(); ++a) {
        const int64_t block_bytes = static_cast<int64_t>(before[a].size()) / num_blocks;
        for (int64_t blk = 0; blk < num_blocks; ++blk) {
          const int64_t from = blk == 1 ? 3 : blk;
          EXPECT_EQ(std::memcmp(after[a].data() + blk * block_bytes, before[a].data() + from * block_bytes,
                                static_cast<size_t>(block_bytes)),
                    0)
              << kernels::kv_dtype_name(dtype) << " array " << a << " block " << blk;
        }
      }
    }
  }
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  auto pool = BlockPool::create(layout(1, kernels::KvDType::kF32), 2);
  ASSERT_TRUE(pool.is_ok());
  int32_t id = *pool->allocate();
  pool->unref(id);
  EXPECT_DEATH(pool->unref(id), "released twice");
}

TEST(BlockPoolDeathTest, EvictOfABlockInUseAborts) {
  auto pool = BlockPool::create(layout(1, kernels::KvDType::kF32), 2);
  ASSERT_TRUE(pool.is_ok());
  int32_t id = *pool->allocate();
  pool->set_cacheable(id);
  EXPECT_DEATH(pool->evict(id), "not cached");
}

}  // namespace
}  // namespace pagoda::kvcache
