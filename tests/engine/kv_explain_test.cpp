// explain_prefix over a bare pool: one test per cause it names (engine/kv_inspect.h), with the
// block manager driven as the engine drives it and KvHistory listening.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <numeric>

#include "engine/kv_inspect.h"

namespace pagoda::engine {
namespace {

using kvcache::BlockManager;
using kvcache::BlockPool;
using kvcache::KvNamespace;

constexpr int64_t kB = 4;  // block size

class ExplainTest : public ::testing::Test {
 protected:
  void SetUp() override { make_pool(16); }

  void make_pool(int64_t num_blocks) {
    manager_.reset();
    kvcache::KvLayout layout;
    layout.n_layer = 1;
    layout.n_kv_head = 1;
    layout.head_dim = 4;
    layout.block_size = kB;
    auto pool = BlockPool::create(layout, num_blocks);
    ASSERT_TRUE(pool.is_ok());
    pool_ = std::make_unique<BlockPool>(std::move(pool).value());
    manager_ = std::make_unique<BlockManager>(*pool_);
    history_ = std::make_unique<KvHistory>(clock_);
    manager_->add_listener(history_.get());
  }
  void TearDown() override {
    if (manager_ != nullptr) manager_->remove_listener(history_.get());
  }

  // A prompt computed and released as the engine does: match, adopt, append, commit, free.
  void serve(const std::vector<int32_t>& tokens, const KvNamespace& ns) {
    kvcache::PrefixMatch hit = manager_->match_prefix(tokens, ns);
    const kvcache::SeqId s = manager_->add_sequence(static_cast<int64_t>(tokens.size()), {ns, 0});
    const int64_t cached = hit.num_tokens();
    manager_->adopt(s, std::move(hit));
    std::vector<int64_t> slots(tokens.size());
    std::vector<kvcache::BlockCopy> copies;
    ASSERT_TRUE(manager_->append(s, std::span<const int32_t>(tokens).subspan(cached), slots, copies));
    manager_->commit(s);
    manager_->free_sequence(s);
    manager_->check_integrity();
  }

  KvExplanation explain(const std::vector<int32_t>& prompt, const KvNamespace& ns,
                        const std::vector<std::vector<int32_t>>& earlier = {}) {
    return explain_with(prompt, ns, [](ExplainContext&) {}, earlier);
  }
  KvExplanation explain_with(const std::vector<int32_t>& prompt, const KvNamespace& ns,
                             const std::function<void(ExplainContext&)>& configure,
                             const std::vector<std::vector<int32_t>>& earlier = {}) {
    ExplainContext c;
    c.blocks = manager_.get();
    c.history = history_.get();
    c.ns = ns;
    c.now_ns = clock_.now_ns();
    configure(c);
    const uint64_t lookups = manager_->stats().num_lookups;
    KvExplanation e = explain_prefix(c, prompt, earlier);
    EXPECT_EQ(manager_->stats().num_lookups, lookups) << "explain must not count a lookup";
    manager_->check_integrity();
    return e;
  }

  static std::vector<int32_t> range(int32_t first, int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), first);
    return v;
  }

  ManualClock clock_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<BlockManager> manager_;
  std::unique_ptr<KvHistory> history_;
  KvNamespace ns_{11, 22, 0};
};

TEST_F(ExplainTest, FullHitLeavesOnlyThePartialTail) {
  const std::vector<int32_t> prompt = range(100, 14);  // 3 full blocks + 2
  serve(prompt, ns_);
  const KvExplanation e = explain(prompt, ns_);
  EXPECT_EQ(e.cause, ExplainCause::kFullHit);
  EXPECT_EQ(e.cacheable_tokens, 12);
  EXPECT_EQ(e.hit_tokens, 12);
  EXPECT_EQ(e.compute_tokens, 2);
  EXPECT_EQ(e.partial_tail_tokens, 2);
  ASSERT_EQ(e.tiers.size(), 1u);
  EXPECT_EQ(e.tiers[0].tier, "pool");
  EXPECT_EQ(e.tiers[0].blocks, 3);
  EXPECT_EQ(e.blocks.size(), 3u);
  // A prompt of exactly 3 blocks: its last block holds the last token, which is always computed.
  const KvExplanation exact = explain(range(100, 12), ns_);
  EXPECT_EQ(exact.cause, ExplainCause::kFullHit);
  EXPECT_EQ(exact.hit_tokens, 8);
  EXPECT_EQ(exact.partial_tail_tokens, 4);
}

TEST_F(ExplainTest, NeverSeenNamesWhereThePromptLeavesTheCachedOne) {
  serve(range(100, 13), ns_);
  const KvExplanation cold = explain(range(500, 13), ns_);
  EXPECT_EQ(cold.cause, ExplainCause::kNeverSeen);
  EXPECT_EQ(cold.hit_tokens, 0);
  EXPECT_EQ(cold.break_block, 0);
  EXPECT_EQ(cold.diverge_token, 0);  // a cached first block exists; it differs at once
  std::vector<int32_t> edited = range(100, 13);
  edited[6] = 7;  // block 1 differs from its third token on
  const KvExplanation e = explain(edited, ns_);
  EXPECT_EQ(e.cause, ExplainCause::kNeverSeen);
  EXPECT_EQ(e.hit_tokens, 4);
  EXPECT_EQ(e.break_block, 1);
  EXPECT_EQ(e.diverge_token, 6);
  ASSERT_EQ(e.blocks.size(), 2u);
  EXPECT_EQ(e.blocks[0].where, "pool");
  EXPECT_EQ(e.blocks[1].where, "miss");
}

TEST_F(ExplainTest, EvictedBlocksAreRemembered) {
  make_pool(4);
  const std::vector<int32_t> first = range(100, 13);  // 3 full blocks cached (+1 in the tail)
  serve(first, ns_);
  clock_.advance_ns(2'000'000'000);
  serve(range(900, 13), ns_);  // needs all 4 blocks: the first prompt's are evicted
  clock_.advance_ns(3'000'000'000);
  EXPECT_GT(manager_->stats().num_evictions, 0);
  const KvExplanation e = explain(first, ns_);
  EXPECT_EQ(e.cause, ExplainCause::kEvicted);
  EXPECT_EQ(e.hit_tokens, 0);
  EXPECT_EQ(e.break_block, 0);
  EXPECT_NEAR(e.evicted_age_s, 3.0, 1e-9);
  EXPECT_NE(e.detail.find("evicted 3.0 s ago"), std::string::npos) << e.detail;
}

// Tiers below the pool (a fake holder map, as TierStack::holders_now answers): the chain goes on
// through them block by block, each block from its fastest holder, and breaks at the first block
// none holds; an evicted block no tier holds says so.
TEST_F(ExplainTest, TiersBelowThePoolContinueTheChain) {
  make_pool(4);
  const std::vector<int32_t> first = range(100, 21);  // 5 full blocks before the last token
  std::vector<kvcache::BlockHash> hashes;
  kvcache::BlockHash parent = kvcache::kRootBlockHash;
  for (int i = 0; i < 5; ++i) {
    parent = kvcache::hash_block(parent, std::span<const int32_t>(first).subspan(i * kB, kB), ns_.key());
    hashes.push_back(parent);
  }
  serve(range(100, 5), ns_);  // the pool keeps block 0 of `first`
  std::map<kvcache::BlockHash, uint32_t> held = {{hashes[1], 0b01}, {hashes[2], 0b11}, {hashes[3], 0b10}};
  auto with_tiers = [&](ExplainContext& c) {
    c.tier_names = {"host", "disk"};
    c.tier_holders = [&](kvcache::BlockHash h) {
      auto it = held.find(h);
      return it == held.end() ? 0u : it->second;
    };
  };
  KvExplanation e = explain_with(first, ns_, with_tiers);
  EXPECT_EQ(e.cause, ExplainCause::kNeverSeen);
  EXPECT_EQ(e.hit_tokens, 4 * kB);
  EXPECT_EQ(e.compute_tokens, 21 - 4 * kB);
  EXPECT_EQ(e.break_block, 4);
  ASSERT_EQ(e.tiers.size(), 3u);
  EXPECT_EQ(e.tiers[0].tier, "pool");
  EXPECT_EQ(e.tiers[0].tokens, kB);
  EXPECT_EQ(e.tiers[1].tier, "host");
  EXPECT_EQ(e.tiers[1].blocks, 2);  // block 2 is in both: the faster one serves it
  EXPECT_EQ(e.tiers[2].tier, "disk");
  EXPECT_EQ(e.tiers[2].tokens, kB);
  ASSERT_EQ(e.blocks.size(), 5u);
  EXPECT_EQ(e.blocks[0].where, "pool");
  EXPECT_EQ(e.blocks[1].where, "host");
  EXPECT_EQ(e.blocks[2].where, "host");
  EXPECT_EQ(e.blocks[3].where, "disk");
  EXPECT_EQ(e.blocks[4].where, "miss");
  EXPECT_EQ(e.blocks[4].hash, hashes[4]);
  EXPECT_NE(e.detail.find("4 tokens would come from the pool and 8 from host, 4 from disk"), std::string::npos)
      << e.detail;
  EXPECT_NE(e.detail.find("block 4 (tokens 16..20) was never cached"), std::string::npos) << e.detail;

  held[hashes[4]] = 0b10;  // everything below the pool: a full hit
  e = explain_with(first, ns_, with_tiers);
  EXPECT_EQ(e.cause, ExplainCause::kFullHit);
  EXPECT_EQ(e.hit_tokens, 5 * kB);
  EXPECT_EQ(e.tiers[2].blocks, 2);

  held.clear();  // the pool's block 0 evicted, and no tier holds it
  serve(range(900, 13), ns_);  // needs all 4 blocks: block 0 of `first` is evicted
  clock_.advance_ns(1'500'000'000);
  e = explain_with(first, ns_, with_tiers);
  EXPECT_EQ(e.cause, ExplainCause::kEvicted);
  EXPECT_EQ(e.hit_tokens, 0);
  EXPECT_EQ(e.tiers.size(), 3u);
  EXPECT_NE(e.detail.find("evicted 1.5 s ago to make room, and no tier below the pool holds it"), std::string::npos)
      << e.detail;
  held[hashes[0]] = 0b01;  // ... and now the host tier has it (evicted to host): a hit there
  e = explain_with(first, ns_, with_tiers);
  EXPECT_EQ(e.tiers[1].blocks, 1);
  EXPECT_EQ(e.hit_tokens, kB);
  EXPECT_EQ(e.blocks[0].where, "host");
}

TEST_F(ExplainTest, AnotherSaltModelOrKvFormatIsNamed) {
  const std::vector<int32_t> prompt = range(100, 13);
  serve(prompt, KvNamespace{11, 22, 5});  // tenant 5
  KvExplanation salt = explain(prompt, KvNamespace{11, 22, 6});
  EXPECT_EQ(salt.cause, ExplainCause::kSaltDiffers);
  EXPECT_EQ(salt.hit_tokens, 0);
  EXPECT_EQ(salt.other_ns_hit_tokens, 12);
  make_pool(16);
  serve(prompt, KvNamespace{99, 22, 0});
  EXPECT_EQ(explain(prompt, ns_).cause, ExplainCause::kModelDiffers);
  make_pool(16);
  serve(prompt, KvNamespace{11, 33, 0});
  const KvExplanation format = explain(prompt, ns_);
  EXPECT_EQ(format.cause, ExplainCause::kKvFormatDiffers);
  EXPECT_NE(format.detail.find("KV format"), std::string::npos);
}

TEST_F(ExplainTest, AChatTemplateThatRewritesAnEarlierTurn) {
  // The earlier turn was sent as `earlier` (and cached with its reply); now the template renders
  // that turn differently from token 5 on, so the chain breaks in block 1.
  std::vector<int32_t> earlier = range(100, 10);
  serve(earlier, ns_);
  std::vector<int32_t> now = range(100, 20);
  now[5] = 3;
  const KvExplanation e = explain(now, ns_, {earlier});
  EXPECT_EQ(e.cause, ExplainCause::kTemplateRewrite);
  EXPECT_EQ(e.diverge_token, 5);
  EXPECT_EQ(e.hit_tokens, 4);
  // An earlier turn that is a prefix explains nothing: the cause is the cache's.
  const KvExplanation prefix = explain(range(100, 20), ns_, {range(100, 10)});
  EXPECT_EQ(prefix.cause, ExplainCause::kNeverSeen);
  EXPECT_EQ(prefix.hit_tokens, 8);
}

TEST_F(ExplainTest, WindowPrefixCacheOffAndTooShort) {
  const std::vector<int32_t> prompt = range(100, 13);
  serve(prompt, ns_);
  ExplainContext c;
  c.blocks = manager_.get();
  c.ns = ns_;
  c.windowed = true;
  EXPECT_EQ(explain_prefix(c, prompt).cause, ExplainCause::kWindow);
  EXPECT_EQ(explain_prefix(c, prompt).hit_tokens, 0);
  c.windowed = false;
  c.prefix_caching = false;
  EXPECT_EQ(explain_prefix(c, prompt).cause, ExplainCause::kPrefixCacheOff);
  c.prefix_caching = true;
  const KvExplanation short_prompt = explain_prefix(c, range(100, 4));
  EXPECT_EQ(short_prompt.cause, ExplainCause::kTooShort);
  EXPECT_EQ(short_prompt.compute_tokens, 4);
  EXPECT_STREQ(explain_cause_name(ExplainCause::kTemplateRewrite), "template_rewrite");
}

TEST_F(ExplainTest, HistoryRecordsTicksNamespacesAndCollidingEvictions) {
  KvHistory h(clock_);
  EXPECT_FALSE(h.time_of_tick(5).has_value());
  h.mark_tick(10, 1000);
  h.mark_tick(20, 2000);
  EXPECT_EQ(*h.time_of_tick(3), 1000);
  EXPECT_EQ(*h.time_of_tick(15), 2000);
  EXPECT_EQ(*h.time_of_tick(25), 2000);
  for (uint64_t t = 21; t < 21 + KvHistory::kTickRing; ++t) h.mark_tick(t, static_cast<int64_t>(t) * 100);
  EXPECT_FALSE(h.time_of_tick(10).has_value());  // older than the ring
  kvcache::BlockInfo a;
  a.hash = 7;
  h.on_block_evicted(a);
  EXPECT_TRUE(h.evicted_at_ns(7).has_value());
  kvcache::BlockInfo b;
  b.hash = 7 + KvHistory::kEvictionSlots;  // the same slot: the newer replaces the older
  h.on_block_evicted(b);
  EXPECT_FALSE(h.evicted_at_ns(7).has_value());
  EXPECT_TRUE(h.evicted_at_ns(b.hash).has_value());
  for (int i = 0; i < KvHistory::kMaxNamespaces + 3; ++i) {
    clock_.advance_ns(1);
    kvcache::BlockInfo s;
    s.ns = KvNamespace{1, 2, static_cast<uint64_t>(i)};
    h.on_blocks_stored(std::span<const kvcache::BlockInfo>(&s, 1));
  }
  const auto seen = h.namespaces();
  ASSERT_EQ(static_cast<int>(seen.size()), KvHistory::kMaxNamespaces);
  EXPECT_EQ(seen.front().ns.cache_salt, static_cast<uint64_t>(KvHistory::kMaxNamespaces + 2));  // most recent first
}

TEST_F(ExplainTest, BlockMapAndLargestPrefixes) {
  serve(range(100, 13), ns_);   // 3 cached blocks
  serve(range(100, 9), ns_);    // a hit on 2 of them
  serve(range(500, 5), ns_);    // 1 cached block
  const kvcache::SeqId running = manager_->add_sequence(8, {ns_, 0});
  std::vector<int64_t> slots(5);
  std::vector<kvcache::BlockCopy> copies;
  const std::vector<int32_t> live = range(700, 5);
  ASSERT_TRUE(manager_->append(running, live, slots, copies));
  kvcache::PrefixMatch pin = manager_->match_prefix(range(500, 5), ns_);  // pins that cached block
  KvSnapshot s;
  snapshot_pool(*manager_, true, s);
  EXPECT_EQ(s.num_blocks, 16);
  EXPECT_EQ(s.blocks_in_use, 2);
  EXPECT_EQ(s.blocks_cached, 4);
  EXPECT_EQ(s.blocks_pinned, 1);
  EXPECT_EQ(s.blocks_free, 10);
  ASSERT_EQ(s.block_map.size(), 16u);
  EXPECT_EQ(std::count(s.block_map.begin(), s.block_map.end(), kBlockInUse), 2);
  EXPECT_EQ(std::count(s.block_map.begin(), s.block_map.end(), kBlockCached), 3);
  EXPECT_EQ(std::count(s.block_map.begin(), s.block_map.end(), kBlockPinned), 1);
  EXPECT_EQ(s.tiers.at(0).tier, "pool");
  const std::vector<CachedPrefix> top = largest_prefixes(*manager_, history_.get(), nullptr, 0, 8, 0);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].num_tokens, 12);
  EXPECT_EQ(top[0].num_blocks, 3);
  EXPECT_EQ(top[1].num_tokens, 4);
  pin.reset();
  manager_->free_sequence(running);
}

TEST(HistogramQuantile, InterpolatesAsPrometheus) {
  Histogram h;
  EXPECT_EQ(histogram_quantile(h, 0.5), 0);
  for (int i = 0; i < 4; ++i) h.observe(0.003);  // bucket (0.0025, 0.005]
  EXPECT_DOUBLE_EQ(histogram_quantile(h, 0.5), 0.0025 + 0.0025 * 0.5);
  h.observe(100);  // +Inf: answered with the highest finite bound
  EXPECT_DOUBLE_EQ(histogram_quantile(h, 0.99), 30);
  EXPECT_EQ(summarize(h).count, 5);
}

}  // namespace
}  // namespace pagoda::engine
