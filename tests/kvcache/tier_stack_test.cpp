// TierStack over a real pool and block manager: write-back on eviction, write-through on
// commit, demotion host -> next tier, probes across tiers, loads into loading blocks that come
// back byte for byte, and every way a load fails (miss, corrupt record, I/O error, disabled
// tier, token mismatch) ending in a shorter prefix, never in wrong KV.
#include "kvcache/tier_stack.h"

#include <gtest/gtest.h>

#include <cstring>

#include "fake_tier.h"
#include "kvcache/block_manager.h"
#include "kvcache/host_tier.h"

namespace pagoda::kvcache {
namespace {

using testing::FakeTier;

KvLayout layout4() {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 1;
  l.head_dim = 2;  // f32: an 8-byte row per slot
  l.block_size = 4;
  return l;
}

constexpr KvNamespace kNs{11, 22, 0};

// The value position p of `tokens` holds: a rolling hash of the tokens so far.
uint64_t kv_at(std::span<const int32_t> tokens, size_t p) {
  uint64_t h = kNs.key();
  for (size_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint64_t>(tokens[i])) * 0x9E3779B97F4A7C15ull;
  return h;
}

class TierStackTest : public ::testing::Test {
 protected:
  void build(int64_t pool_blocks, int64_t host_blocks, int64_t fake_blocks, OffloadMode mode = OffloadMode::kWriteBack) {
    pool_.emplace(BlockPool::create(layout4(), pool_blocks).value());
    bm_.emplace(*pool_);
    stack_.emplace(*pool_, mode, clock_, logger_);
    if (host_blocks > 0) {
      const int64_t slot = (record_bytes(record_meta_for(layout4())) + 63) / 64 * 64;
      HostTierOptions o;
      o.capacity_bytes = host_blocks * slot;
      o.layout = layout4();
      auto host = HostTier::create(o, clock_).value();
      host_ = host.get();
      stack_->add_tier(std::move(host));
    }
    auto fake = std::make_unique<FakeTier>("fake", layout4(), fake_blocks);
    fake_ = fake.get();
    stack_->add_tier(std::move(fake));
    bm_->add_listener(&*stack_);
  }
  void TearDown() override {
    if (bm_) bm_->remove_listener(&*stack_);
    stack_.reset();
    bm_.reset();
  }
  void write_kv(int64_t slot, uint64_t value) {
    std::memcpy(static_cast<uint8_t*>(pool_->layer_view(0).k) + slot * 8, &value, 8);
    const uint64_t inverse = ~value;
    std::memcpy(static_cast<uint8_t*>(pool_->layer_view(1).v) + slot * 8, &inverse, 8);
  }
  bool holds_kv(int64_t slot, uint64_t value) {
    uint64_t k, v;
    std::memcpy(&k, static_cast<uint8_t*>(pool_->layer_view(0).k) + slot * 8, 8);
    std::memcpy(&v, static_cast<uint8_t*>(pool_->layer_view(1).v) + slot * 8, 8);
    return k == value && v == ~value;
  }
  // Prefills `tokens` (through the pool's prefix cache), commits, frees: its blocks are cached.
  void compute(const std::vector<int32_t>& tokens) {
    PrefixMatch hit = bm_->match_prefix(tokens, kNs);
    const SeqId s = bm_->add_sequence(static_cast<int64_t>(tokens.size()), {kNs, 0});
    const int64_t cached = hit.num_tokens();
    bm_->adopt(s, std::move(hit));
    const std::vector<int32_t> rest(tokens.begin() + cached, tokens.end());
    std::vector<int64_t> slots(rest.size());
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(bm_->append(s, rest, slots, copies));
    for (size_t i = 0; i < rest.size(); ++i) write_kv(slots[i], kv_at(tokens, static_cast<size_t>(cached) + i));
    bm_->commit(s);
    bm_->free_sequence(s);
    bm_->check_integrity();
  }
  std::vector<int32_t> tokens(int n, int32_t base) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(base + i);
    return t;
  }
  std::vector<BlockHash> hashes(const std::vector<int32_t>& t) {
    std::vector<BlockHash> h;
    chain_hashes(&hash_block, kRootBlockHash, t, 4, kNs.key(), h);
    return h;
  }
  std::vector<TierRun> probe(const std::vector<BlockHash>& chain) {
    const ProbeId id = stack_->probe(chain);
    for (int i = 0; i < 4; ++i) {
      if (auto runs = stack_->take_probe(id)) return *runs;
      fake_->complete_all();
      stack_->poll();
    }
    ADD_FAILURE() << "probe never finished";
    return {};
  }
  // Admits `t` with its whole blocks from the tiers (after any pool hit), loads, finishes.
  // Returns the computed length after the load, and checks every loaded position's KV.
  int64_t admit_loading(const std::vector<int32_t>& t, bool complete_fake = true) {
    PrefixMatch hit = bm_->match_prefix(t, kNs);
    const int64_t cached = hit.num_tokens();
    const SeqId s = bm_->add_sequence(static_cast<int64_t>(t.size()), {kNs, 0});
    bm_->adopt(s, std::move(hit));
    const std::vector<int32_t> rest(t.begin() + cached, t.begin() + (static_cast<int64_t>(t.size()) - 1) / 4 * 4);
    std::vector<BlockHash> chain;
    const BlockHash parent = cached > 0 ? bm_->index().hash(bm_->block_table(s)[cached / 4 - 1]) : kRootBlockHash;
    chain_hashes(&hash_block, parent, rest, 4, kNs.key(), chain);
    const std::vector<TierRun> runs = probe(chain);
    int64_t found = 0;
    for (const TierRun& r : runs) found += r.count;
    if (found == 0) {
      bm_->free_sequence(s);
      return cached;
    }
    EXPECT_TRUE(bm_->begin_load(s, std::span<const int32_t>(rest).first(static_cast<size_t>(found * 4))));
    bm_->check_integrity();
    const auto blocks = bm_->loading_blocks(s);
    std::vector<LoadItem> items;
    for (const TierRun& r : runs) {
      for (int64_t i = r.begin; i < r.begin + r.count; ++i) items.push_back({blocks[static_cast<size_t>(i)], chain[static_cast<size_t>(i)], r.tier});
    }
    const LoadId load = stack_->load(kNs, items);
    stack_->check_integrity();
    std::optional<LoadResult> result;
    for (int i = 0; i < 4 && !result; ++i) {
      if (complete_fake) fake_->complete_all();
      stack_->poll();
      stack_->check_integrity();
      result = stack_->take_load(load);
    }
    EXPECT_TRUE(result.has_value());
    last_result_ = *result;
    bm_->finish_load(s, result->num_ok, result->tokens);
    bm_->check_integrity();
    const int64_t computed = bm_->num_computed(s);
    const auto& table = bm_->block_table(s);
    for (int64_t p = 0; p < computed; ++p) {
      EXPECT_TRUE(holds_kv(table[p / 4] * 4 + p % 4, kv_at(t, static_cast<size_t>(p)))) << "position " << p;
    }
    bm_->free_sequence(s);
    bm_->check_integrity();
    return computed;
  }

  ManualClock clock_;
  Logger logger_{LogLevel::kError};
  std::optional<BlockPool> pool_;
  std::optional<BlockManager> bm_;
  std::optional<TierStack> stack_;
  HostTier* host_ = nullptr;
  FakeTier* fake_ = nullptr;
  LoadResult last_result_;
};

TEST_F(TierStackTest, WriteBackPutsEvictedBlocksIntoTheFirstTier) {
  build(/*pool=*/4, /*host=*/16, /*fake=*/16);
  const auto a = tokens(16, 100);  // 4 blocks fill the pool
  compute(a);
  EXPECT_EQ(host_->stats().used_blocks, 0) << "write-back: nothing written before an eviction";
  compute(tokens(8, 500));  // evicts 2 of a's blocks (leaves first)
  EXPECT_EQ(bm_->stats().num_evictions, 2);
  EXPECT_EQ(host_->stats().used_blocks, 2);
  EXPECT_EQ(stack_->counters(0).offloaded_blocks, 2);
  stack_->poll();
  stack_->check_integrity();
}

TEST_F(TierStackTest, WriteThroughPutsEveryCommittedBlock) {
  build(4, 16, 16, OffloadMode::kWriteThrough);
  compute(tokens(9, 100));
  EXPECT_EQ(host_->stats().used_blocks, 2);
  compute(tokens(16, 300));  // evictions of blocks the host holds only refresh them
  EXPECT_EQ(host_->stats().used_blocks, 6);
}

TEST_F(TierStackTest, HostEvictionDemotesToTheNextTier) {
  build(4, /*host=*/2, /*fake=*/16);
  compute(tokens(16, 100));
  compute(tokens(16, 300));  // evicts all 4 of the first: host keeps 2, demotes 2
  EXPECT_EQ(host_->stats().used_blocks, 2);
  EXPECT_EQ(fake_->size(), 2);
  EXPECT_EQ(stack_->counters(1).demoted_blocks, 2);
  fake_->complete_all();
  stack_->poll();
  stack_->check_integrity();
}

TEST_F(TierStackTest, LoadsAPrefixSplitAcrossTiersByteForByte) {
  build(/*pool=*/8, /*host=*/6, /*fake=*/16);
  const auto a = tokens(17, 100);  // 4 whole blocks + 1 token
  const std::vector<BlockHash> chain = hashes(std::vector<int32_t>(a.begin(), a.begin() + 16));
  compute(a);
  compute(tokens(32, 300));  // evicts a's 4 blocks into the host
  EXPECT_EQ(probe(std::vector<BlockHash>(chain.begin(), chain.begin() + 2)).at(0).count, 2);  // a hit touches
  compute(tokens(16, 600));  // 4 more evictions: the host demotes a's untouched blocks 2 and 3
  EXPECT_TRUE(fake_->holds(chain[2]) && fake_->holds(chain[3]));
  const std::vector<TierRun> runs = probe(chain);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].tier, 0);
  EXPECT_EQ(runs[0].count, 2);
  EXPECT_EQ(runs[1].tier, 1);
  EXPECT_EQ(runs[1].begin, 2);
  EXPECT_EQ(runs[1].count, 2);
  EXPECT_EQ(admit_loading(a), 16);
  EXPECT_EQ(last_result_.num_ok, 4);
  EXPECT_EQ(stack_->counters(0).loaded_blocks, 2);
  EXPECT_EQ(stack_->counters(1).loaded_blocks, 2);
  EXPECT_GT(stack_->counters(1).load_latency.count, 0);
  // The loaded blocks are registered: the next admission hits them in the pool.
  PrefixMatch again = bm_->match_prefix(a, kNs);
  EXPECT_EQ(again.num_tokens(), 16);
}

TEST_F(TierStackTest, ALoadWaitsForTheSlowTier) {
  build(4, 0, 16);  // the fake tier alone
  const auto a = tokens(9, 100);
  compute(a);
  compute(tokens(16, 300));
  ASSERT_TRUE(fake_->holds(hashes(a)[0]));
  // Probe and load by hand, completing the fake tier's ops one poll at a time.
  const std::vector<BlockHash> chain = hashes(std::vector<int32_t>(a.begin(), a.begin() + 8));
  const ProbeId probe_id = stack_->probe(chain);
  EXPECT_FALSE(stack_->take_probe(probe_id).has_value()) << "the lookup is still queued";
  stack_->check_integrity();
  fake_->complete_all();
  stack_->poll();
  const auto runs = stack_->take_probe(probe_id);
  ASSERT_TRUE(runs.has_value());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].count, 2);
}

TEST_F(TierStackTest, CorruptRecordFailsTheLoadFromThatBlockOn) {
  build(8, 0, 16);
  const auto a = tokens(17, 100);
  compute(a);
  compute(tokens(32, 300));
  fake_->complete_all();
  stack_->poll();
  fake_->corrupt(hashes(a)[2]);
  EXPECT_EQ(admit_loading(a), 8) << "blocks 0 and 1 load; 2 and 3 are recomputed";
  EXPECT_FALSE(last_result_.status.is_ok());
  EXPECT_EQ(fake_->stats().corrupt_records, 1);
  EXPECT_EQ(stack_->counters(0).failed_loads, 1);
}

TEST_F(TierStackTest, IoErrorAndDisabledTierFailCleanly) {
  build(8, 0, 16);
  const auto a = tokens(17, 100);
  compute(a);
  compute(tokens(32, 300));
  fake_->fail_get(hashes(a)[0]);
  EXPECT_EQ(admit_loading(a), 0);
  fake_->disable();
  EXPECT_EQ(admit_loading(a), 0) << "a disabled tier is skipped by probes";
  compute(tokens(16, 700));  // puts into the disabled tier are dropped, not errors
  stack_->poll();
  EXPECT_TRUE(stack_->counters(0).disabled);
}

TEST_F(TierStackTest, TokenMismatchIsNeverAdopted) {
  // A hash function that ignores the tokens: every block of the same position collides.
  pool_.emplace(BlockPool::create(layout4(), 4).value());
  bm_.emplace(*pool_, BlockManagerOptions{EvictionPolicyKind::kLru, nullptr,
                                          [](BlockHash parent, std::span<const int32_t>, uint64_t ns) {
                                            return parent * 31 + ns + 1;
                                          }});
  stack_.emplace(*pool_, OffloadMode::kWriteBack, clock_, logger_);
  auto fake = std::make_unique<FakeTier>("fake", layout4(), 16);
  fake_ = fake.get();
  stack_->add_tier(std::move(fake));
  bm_->add_listener(&*stack_);
  compute(tokens(9, 100));
  compute(tokens(16, 300));  // evicts the 2 blocks of the first into the fake tier
  const auto b = tokens(9, 900);  // other tokens, the same (colliding) hashes
  PrefixMatch hit = bm_->match_prefix(b, kNs);
  EXPECT_EQ(hit.num_tokens(), 0);
  hit.reset();
  const SeqId s = bm_->add_sequence(9, {kNs, 0});
  ASSERT_TRUE(bm_->begin_load(s, std::span<const int32_t>(b).first(8)));
  std::vector<BlockHash> chain;
  chain_hashes(bm_->hash_fn(), kRootBlockHash, std::span<const int32_t>(b).first(8), 4, kNs.key(), chain);
  const auto blocks = bm_->loading_blocks(s);
  const std::vector<LoadItem> items{{blocks[0], chain[0], 0}, {blocks[1], chain[1], 0}};
  const LoadId load = stack_->load(kNs, items);
  fake_->complete_all();
  stack_->poll();
  std::optional<LoadResult> r = stack_->take_load(load);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->num_ok, 2) << "the records verify: their hashes match";
  EXPECT_EQ(bm_->finish_load(s, r->num_ok, r->tokens), 0) << "but their tokens are not the prompt's";
  EXPECT_EQ(bm_->num_computed(s), 0);
  EXPECT_EQ(bm_->length(s), 0);
  bm_->check_integrity();
  bm_->free_sequence(s);
}

}  // namespace
}  // namespace pagoda::kvcache
