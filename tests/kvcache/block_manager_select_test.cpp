// Selecting sequences (kvcache/kv_select.h) in the block manager: compaction moves surviving
// rows (every layer's K and V) into the victims' slots, frees emptied tail blocks, keeps each
// row's logical position and score with it; never registered in the prefix index; plan counts
// the blocks after an eviction. A randomised run mixes selecting and cacheable sequences and
// checks integrity and every stored row's K/V after each operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/rng.h"
#include "kernels/kv_store.h"
#include "kvcache/block_manager.h"

namespace pagoda::kvcache {
namespace {

KvLayout select_layout() {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 2;
  l.head_dim = 4;
  l.block_size = 4;
  return l;
}

// The value every K (V: negated) element of (sequence, position, layer) holds.
float mark(SeqId seq, int64_t pos, int64_t layer) { return static_cast<float>(seq * 1000 + pos * 2 + layer); }

void write_rows(BlockPool& pool, SeqId seq, int64_t first_pos, std::span<const int64_t> slots) {
  const KvLayout& l = pool.layout();
  const int64_t dim = l.n_kv_head * l.head_dim;
  for (int64_t layer = 0; layer < l.n_layer; ++layer) {
    std::vector<float> k(slots.size() * dim), v(k.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      std::fill_n(k.begin() + i * dim, dim, mark(seq, first_pos + static_cast<int64_t>(i), layer));
      std::fill_n(v.begin() + i * dim, dim, -mark(seq, first_pos + static_cast<int64_t>(i), layer));
    }
    kernels::store_kv(pool.layer_view(layer), k.data(), v.data(), slots.data(), static_cast<int64_t>(slots.size()));
  }
}

void expect_rows(BlockManager& m, SeqId seq) {
  BlockPool& pool = m.pool();
  const KvLayout& l = pool.layout();
  const KvSelectState& st = *m.select_state(seq);
  std::vector<float> row(l.head_dim);
  for (int64_t i = 0; i < m.length(seq); ++i) {
    const int32_t b = m.block_table(seq)[i / l.block_size];
    for (int64_t layer = 0; layer < l.n_layer; ++layer) {
      for (int64_t h = 0; h < l.n_kv_head; ++h) {
        kernels::kv_load_row_reference(pool.layer_view(layer), true, b, i % l.block_size, h, false, row.data());
        ASSERT_EQ(row[0], mark(seq, st.positions[i], layer)) << "seq " << seq << " row " << i;
        kernels::kv_load_row_reference(pool.layer_view(layer), false, b, i % l.block_size, h, false, row.data());
        ASSERT_EQ(row[3], -mark(seq, st.positions[i], layer)) << "seq " << seq << " row " << i;
      }
    }
  }
}

SequenceOptions h2o_options(int64_t budget) {
  SequenceOptions o;
  o.select.method = KvSelectMethod::kH2O;
  o.select.budget = budget;
  o.select.recent = 2;
  return o;
}

TEST(BlockManagerSelect, CompactMovesRowsAndFreesBlocks) {
  auto pool = BlockPool::create(select_layout(), 16);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  const SeqId s = m.add_sequence(64, h2o_options(8));
  std::vector<int32_t> tokens(14);
  for (int i = 0; i < 14; ++i) tokens[i] = 100 + i;
  std::vector<int64_t> slots(14);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.append(s, tokens, slots, copies));
  write_rows(*pool, s, 0, slots);
  m.commit(s);
  EXPECT_EQ(m.index().size(), 0) << "selecting sequences are never registered";
  EXPECT_EQ(m.num_held_blocks(s), 4);
  for (int i = 0; i < 14; ++i) m.select_state(s)->scores[i] = static_cast<float>(i);
  const std::vector<int64_t> victims = {1, 2, 5, 12};  // one in the tail (12)
  m.compact(s, victims);
  m.check_integrity();
  EXPECT_EQ(m.length(s), 10);
  EXPECT_EQ(m.next_position(s), 14);
  EXPECT_EQ(m.num_held_blocks(s), 3) << "the emptied tail block is freed";
  EXPECT_EQ(pool->num_free(), 13);
  const KvSelectState& st = *m.select_state(s);
  std::vector<int32_t> kept(st.positions.begin(), st.positions.end());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 3, 4, 6, 7, 8, 9, 10, 11, 13}));
  for (int64_t i = 0; i < m.length(s); ++i) EXPECT_EQ(st.scores[i], static_cast<float>(st.positions[i]));
  expect_rows(m, s);
  // With the budget 8 and evicting, growing by 2 needs no new block: 10 -> 6 rows -> 8.
  EXPECT_EQ(m.plan(s, 2).num_new_blocks, 0);
  // The next append continues at logical position 14, in stored row 10.
  std::vector<int64_t> slot1(1);
  ASSERT_TRUE(m.append(s, std::span<const int32_t>(tokens.data(), 1), slot1, copies));
  EXPECT_EQ(m.select_state(s)->positions.back(), 14);
  m.free_sequence(s);
  m.check_integrity();
  EXPECT_EQ(pool->num_free(), 16);
}

TEST(BlockManagerSelect, RandomisedWithCacheableSequences) {
  auto pool = BlockPool::create(select_layout(), 40);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  Rng rng(11);
  std::map<SeqId, bool> live;  // sequence -> selecting
  std::vector<int64_t> slots(8), victims;
  std::vector<BlockCopy> copies;
  KvNamespace ns;
  for (int op = 0; op < 1500; ++op) {
    const uint64_t r = rng.next_u64() % 10;
    if (live.size() < 2 || r == 0) {
      const bool selecting = rng.next_u64() % 2 == 0;
      SequenceOptions o = selecting ? h2o_options(12) : SequenceOptions{};
      o.ns = ns;
      live[m.add_sequence(256, o)] = selecting;
    } else if (r == 1) {
      auto it = live.begin();
      std::advance(it, rng.next_u64() % live.size());
      m.free_sequence(it->first);
      live.erase(it);
    } else {
      auto it = live.begin();
      std::advance(it, rng.next_u64() % live.size());
      const SeqId s = it->first;
      if (it->second && m.length(s) > 3 && r < 5) {  // compact a random subset
        victims.clear();
        for (int64_t i = 0; i < m.length(s); ++i) {
          if (rng.next_u64() % 3 == 0) victims.push_back(i);
        }
        m.compact(s, victims);
      } else {
        const int64_t n = 1 + static_cast<int64_t>(rng.next_u64() % 6);
        std::vector<int32_t> tokens(n);
        for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % 5);
        const int64_t first = m.next_position(s);
        if (!m.append(s, tokens, std::span<int64_t>(slots.data(), n), copies)) continue;
        for (const BlockCopy& c : copies) pool->copy_block(c.src_block, c.dst_block);
        copies.clear();
        if (it->second) write_rows(*pool, s, first, std::span<const int64_t>(slots.data(), n));
        m.commit(s);
      }
    }
    m.check_integrity();
    for (const auto& [s, selecting] : live) {
      if (selecting) expect_rows(m, s);
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(KvSelect, VictimsSkipRecentAndPickLowest) {
  const std::vector<int32_t> positions = {0, 9, 2, 3, 8, 5, 6};
  const std::vector<float> scores = {5, 0, 1, 1, 0, 7, 0.5f};
  std::vector<int64_t> out;
  choose_victims(positions, scores, 2, 2, out);  // recent: positions 8, 9
  EXPECT_EQ(out, (std::vector<int64_t>{2, 6}));  // 0.5 (pos 6), then 1 (pos 2, older than pos 3)
  choose_victims(positions, scores, 5, 2, out);
  EXPECT_EQ(out, (std::vector<int64_t>{0, 2, 3, 5, 6}));
}

TEST(KvSelect, SnapKvUnionOfHeadsByRank) {
  // Two heads over 8 positions, window = the last 2; kernel 1 (no pooling) and 3.
  const std::vector<float> obs = {9, 0, 0, 0, 0, 1, 0, 0,    // head 0 likes position 0, then 5
                                  0, 0, 0, 8, 0, 0, 0, 0};   // head 1 likes position 3
  std::vector<float> keys(8);
  snapkv_keys(obs, 2, 8, 6, 1, keys);
  EXPECT_EQ(keys[0], 0.0f);
  EXPECT_EQ(keys[3], 0.0f);
  EXPECT_EQ(keys[5], -1.0f);
  EXPECT_EQ(keys[6], 1.0f);
  EXPECT_EQ(keys[7], 1.0f);
  snapkv_keys(obs, 2, 8, 6, 3, keys);  // pooled: neighbours of a peak share its score
  EXPECT_EQ(std::max(keys[0], keys[1]), 0.0f);
  EXPECT_GE(keys[2], -3.0f);
  KvSelectParams p{KvSelectMethod::kSnapKv, 64};
  ASSERT_TRUE(normalize_kv_select(p).is_ok());
  EXPECT_EQ(p.observe, 32);
  EXPECT_EQ(p.recent, 32);
  KvSelectParams bad{KvSelectMethod::kH2O, 8, 8};
  EXPECT_FALSE(normalize_kv_select(bad).is_ok());
}

}  // namespace
}  // namespace pagoda::kvcache
