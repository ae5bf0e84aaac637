// CachePins over a bare block pool: pinned prefixes survive any eviction pressure, the bound
// counts distinct blocks, expiry follows the caller's clock, and integrity holds throughout.
#include "kvcache/cache_pins.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/rng.h"

namespace pagoda::kvcache {
namespace {

KvLayout layout(int64_t block_size) {
  KvLayout l;
  l.n_layer = 1;
  l.n_kv_head = 1;
  l.head_dim = 4;
  l.block_size = block_size;
  return l;
}

constexpr int64_t kSecond = 1'000'000'000;

struct PinHarness {
  PinHarness(int64_t block_size, int64_t num_blocks, int64_t max_pinned)
      : pool(BlockPool::create(layout(block_size), num_blocks).value()), m(pool), pins(m, max_pinned) {}

  // A prompt computed as the engine does (match, adopt, append, commit) and finished: its full
  // blocks end up cached.
  void compute(const std::vector<int32_t>& prompt, const KvNamespace& ns = {}) {
    PrefixMatch hit = m.match_prefix(prompt, ns);
    SequenceOptions o;
    o.ns = ns;
    const SeqId s = m.add_sequence(static_cast<int64_t>(prompt.size()), o);
    const int64_t cached = hit.num_tokens();
    m.adopt(s, std::move(hit));
    std::vector<int64_t> slots(prompt.size());
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(m.append(s, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(cached)), slots, copies));
    m.commit(s);
    m.free_sequence(s);
    check();
  }
  Result<const CachePin*> pin(const std::vector<int32_t>& prompt, int64_t now, int64_t ttl = 0,
                              const KvNamespace& ns = {}, bool* refreshed = nullptr) {
    CachePinSpec spec;
    spec.tokens = prompt;
    spec.ns = ns;
    spec.ttl_ns = ttl;
    auto out = pins.pin(spec, now, refreshed);
    check();
    return out;
  }
  int64_t cached_tokens(const std::vector<int32_t>& prompt, const KvNamespace& ns = {}) const {
    return m.plan(prompt, ns).num_cached_tokens;
  }
  void check() const {
    m.check_integrity();
    pins.check_integrity();
  }

  BlockPool pool;
  BlockManager m;
  CachePins pins;
};

std::vector<int32_t> tokens_from(int32_t first, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(CachePins, PinnedPrefixSurvivesAFloodOfOtherPrompts) {
  PinHarness h(4, 16, 8);
  const std::vector<int32_t> system = tokens_from(1000, 12);  // three full blocks
  h.compute(system);
  auto pinned = h.pin(system, 0);
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().message();
  EXPECT_EQ((*pinned)->match.num_tokens(), 12);
  EXPECT_EQ(h.pins.num_pinned_blocks(), 3);
  EXPECT_EQ(h.m.num_available_blocks(), 13);  // pinned cached blocks are not available
  for (int32_t i = 0; i < 40; ++i) h.compute(tokens_from(i * 100, 17));  // 5 blocks each, 13 free
  EXPECT_GT(h.m.stats().num_evictions, 30);
  EXPECT_EQ(h.cached_tokens(system), 8);  // capped before the last token
  EXPECT_EQ(h.cached_tokens([&] { auto t = system; t.push_back(7); return t; }()), 12);
  ASSERT_TRUE(h.pins.unpin((*pinned)->id));
  h.check();
  EXPECT_EQ(h.pins.num_pinned_blocks(), 0);
  EXPECT_EQ(h.m.num_available_blocks(), 16);
  for (int32_t i = 0; i < 8; ++i) h.compute(tokens_from(9000 + i * 100, 17));
  EXPECT_EQ(h.cached_tokens([&] { auto t = system; t.push_back(7); return t; }()), 0);  // evicted once unpinned
  EXPECT_FALSE(h.pins.unpin(12345));
}

TEST(CachePins, BoundCountsDistinctBlocksAndRefusesBeyondIt) {
  PinHarness h(4, 16, 5);
  const std::vector<int32_t> a = tokens_from(0, 12);  // 3 blocks
  std::vector<int32_t> b = a;                          // shares a's 3 blocks, then 1 more
  for (int32_t t : tokens_from(500, 4)) b.push_back(t);
  const std::vector<int32_t> c = tokens_from(800, 12);  // 3 blocks of its own
  h.compute(a);
  h.compute(b);
  h.compute(c);
  ASSERT_TRUE(h.pin(a, 0).is_ok());
  EXPECT_EQ(h.pins.blocks_to_add(b, {}), 1);
  ASSERT_TRUE(h.pin(b, 0).is_ok());
  EXPECT_EQ(h.pins.num_pins(), 2);
  EXPECT_EQ(h.pins.num_pinned_blocks(), 4);  // not 7
  EXPECT_EQ(h.pins.blocks_to_add(c, {}), 3);
  auto refused = h.pin(c, 0);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max-pinned-share"), std::string::npos) << refused.status().message();
  EXPECT_EQ(h.pins.num_pins(), 2);  // nothing changed
  EXPECT_EQ(h.pins.num_pinned_blocks(), 4);
  EXPECT_EQ(h.m.pin_count(h.pins.pins()[0]->match.blocks()[0]), 2);  // shared by both pins
  // Dropping a's pin keeps its blocks pinned through b's.
  ASSERT_TRUE(h.pins.unpin(h.pins.pins()[0]->id));
  h.check();
  EXPECT_EQ(h.pins.num_pinned_blocks(), 4);
  // Nothing cached: nothing to pin.
  auto none = h.pin(tokens_from(3000, 8), 0);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

TEST(CachePins, ExpiryFollowsTheCallersClockAndRepinningRefreshesIt) {
  PinHarness h(4, 16, 8);
  const std::vector<int32_t> a = tokens_from(0, 8), b = tokens_from(100, 8), c = tokens_from(200, 8);
  h.compute(a);
  h.compute(b);
  h.compute(c);
  const int64_t id_a = (*h.pin(a, 0, 10 * kSecond))->id;
  const int64_t id_b = (*h.pin(b, 0, 30 * kSecond))->id;
  const int64_t id_c = (*h.pin(c, 0))->id;  // no ttl
  EXPECT_EQ(h.pins.expire(10 * kSecond - 1), 0);
  EXPECT_EQ(h.pins.num_pins(), 3);
  // Re-pinning b at 5 s with 10 s: it now expires at 15 s, same id.
  bool refreshed = false;
  auto again = h.pin(b, 5 * kSecond, 10 * kSecond, {}, &refreshed);
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(refreshed);
  EXPECT_EQ((*again)->id, id_b);
  EXPECT_EQ((*again)->expires_ns(), 15 * kSecond);
  EXPECT_EQ(h.pins.expire(10 * kSecond), 1);  // a
  h.check();
  EXPECT_EQ(h.pins.find(id_a), nullptr);
  EXPECT_NE(h.pins.find(id_b), nullptr);
  EXPECT_EQ(h.pins.expire(15 * kSecond), 1);  // b
  EXPECT_EQ(h.pins.expire(1000 * kSecond), 0);  // c never expires
  EXPECT_NE(h.pins.find(id_c), nullptr);
  EXPECT_EQ(h.pins.num_expired(), 2);
  h.check();
  // Another namespace is another pin (and needs its own cached blocks).
  const KvNamespace salted{0, 0, 42};
  EXPECT_EQ(h.pin(c, 0, 0, salted).status().code(), StatusCode::kNotFound);
  h.compute(c, salted);
  EXPECT_NE((*h.pin(c, 0, 0, salted))->id, id_c);
  EXPECT_EQ(h.pins.num_pins(), 2);
  h.pins.clear();
  h.check();
  EXPECT_EQ(h.m.num_available_blocks(), 16);
}

TEST(CachePins, RandomPinsUnpinsAndExpiriesUnderPressureKeepIntegrity) {
  PinHarness h(4, 24, 10);
  Rng rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 12; ++i) {
    std::vector<int32_t> p = tokens_from(0, 4 * (1 + i % 3));  // shared roots
    for (int32_t t : tokens_from(1000 + 100 * i, 4 + rng.next_u64() % 9)) p.push_back(t);
    prompts.push_back(std::move(p));
  }
  int64_t now = 0;
  for (int step = 0; step < 600; ++step) {
    now += static_cast<int64_t>(rng.next_u64() % 3) * kSecond;
    const auto& p = prompts[rng.next_u64() % prompts.size()];
    switch (rng.next_u64() % 4) {
      case 0:
      case 1:
        h.compute(p);
        break;
      case 2: {
        auto r = h.pin(p, now, static_cast<int64_t>(rng.next_u64() % 4) * 5 * kSecond);
        if (r.is_ok()) {  // every pinned block stays cached until the pin goes
          for (int32_t b : (*r)->match.blocks()) EXPECT_NE(h.pool.state(b), BlockState::kFree);
        } else {
          EXPECT_TRUE(r.status().code() == StatusCode::kResourceExhausted || r.status().code() == StatusCode::kNotFound);
        }
        break;
      }
      default:
        if (h.pins.num_pins() > 0 && rng.next_u64() % 2 == 0) {
          EXPECT_TRUE(h.pins.unpin(h.pins.pins()[rng.next_u64() % h.pins.pins().size()]->id));
        } else {
          h.pins.expire(now);
        }
        h.check();
    }
    for (const auto& pin : h.pins.pins()) {
      std::vector<int32_t> longer = pin->tokens;
      longer.resize(static_cast<size_t>(pin->match.num_tokens()));
      longer.push_back(1);
      EXPECT_GE(h.cached_tokens(longer), pin->match.num_tokens()) << "pin " << pin->id << " lost blocks";
    }
    EXPECT_LE(h.pins.num_pinned_blocks(), 10);
  }
}

}  // namespace
}  // namespace pagoda::kvcache
