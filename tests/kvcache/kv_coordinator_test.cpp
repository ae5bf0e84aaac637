// KvCoordinator: scenarios for the hit rule, window release, eviction across groups and
// copy-on-write, then randomised operation sequences with a stand-in forward pass that writes,
// for every position, a hash of its namespace and all tokens up to it into each part's slot.
// After every operation: check_integrity, and every live sequence reads exactly the KV its
// tokens imply at every position it still holds, so a wrong hit, a missed copy or an eviction
// of a held block shows up as wrong bytes.
#include "kvcache/kv_coordinator.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "expected_kv.h"

namespace pagoda::kvcache {
namespace {

using kernels::KvDType;

constexpr int64_t kB = 16;

// n_full full layers and n_sliding sliding layers (window w), equal shapes.
KvCacheSpec make_spec(int64_t n_full, int64_t n_sliding, int64_t window) {
  std::vector<KvLayerSpec> layers;
  for (int64_t i = 0; i < n_sliding; ++i) layers.push_back({KvGroupKind::kSliding, window, 1, 8, KvDType::kF16, -1});
  for (int64_t i = 0; i < n_full; ++i) layers.push_back({KvGroupKind::kFull, 0, 1, 8, KvDType::kF16, -1});
  auto spec = make_kv_cache_spec(kB, layers);
  CHECK(spec.is_ok());
  return *spec;
}

using testing::expected_kv;  // expected_kv.h

std::vector<int32_t> iota_tokens(int64_t n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// The coordinator plus page memory: one uint64 per (page, slot).
struct Harness {
  KvCacheSpec spec;
  KvPageLayout layout;
  KvCoordinator kv;
  std::vector<uint64_t> memory;
  std::map<KvSeqId, std::vector<int32_t>> tokens;  // every live sequence's tokens
  KvNamespace ns{1, 2, 3};

  Harness(const KvCacheSpec& s, int64_t num_pages)
      : spec(s), layout(*plan_page_layout(s)), kv(spec, layout, num_pages), memory(static_cast<size_t>(num_pages * kB), 0) {}

  // append + copies + forward + commit; false when it does not fit.
  bool step(KvSeqId seq, std::span<const int32_t> t) {
    std::vector<KvGroupCopy> copies;
    const bool fits = kv.plan(seq, static_cast<int64_t>(t.size())).fits();
    if (!kv.append(seq, t, copies)) {
      EXPECT_FALSE(fits);
      return false;
    }
    EXPECT_TRUE(fits);
    for (const KvGroupCopy& c : copies) {
      for (int64_t part = 0; part < layout.parts[static_cast<size_t>(c.group)]; ++part) {
        const int64_t src = kv.page(c.group, c.src_block, part) * kB, dst = kv.page(c.group, c.dst_block, part) * kB;
        std::copy(memory.begin() + src, memory.begin() + src + kB, memory.begin() + dst);
      }
    }
    auto& all = tokens[seq];
    const int64_t start = static_cast<int64_t>(all.size());
    all.insert(all.end(), t.begin(), t.end());
    const std::vector<uint64_t> want = expected_kv(ns, all);
    for (int64_t pos = start; pos < static_cast<int64_t>(all.size()); ++pos) {
      for (size_t g = 0; g < spec.groups.size(); ++g) {
        for (int64_t part = 0; part < layout.parts[g]; ++part) memory[static_cast<size_t>(kv.slot(seq, static_cast<int64_t>(g), part, pos))] = want[pos];
      }
    }
    kv.commit(seq);
    return true;
  }

  // A new sequence for prompt: match, plan, add, adopt, prefill the rest. -1 when it does not fit.
  KvSeqId admit(const std::vector<int32_t>& prompt, int64_t* hit = nullptr) {
    KvGroupMatch match = kv.match_prefix(prompt, ns);
    if (hit) *hit = match.num_tokens();
    if (!kv.plan(match, static_cast<int64_t>(prompt.size())).fits()) return -1;
    const KvSeqId seq = kv.add_sequence(static_cast<int64_t>(prompt.size()) + 64, ns);
    const int64_t n_hit = match.num_tokens();
    kv.adopt(seq, std::move(match));
    tokens[seq].assign(prompt.begin(), prompt.begin() + n_hit);
    EXPECT_TRUE(step(seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(n_hit))));
    return seq;
  }

  void free(KvSeqId seq) {
    kv.free_sequence(seq);
    tokens.erase(seq);
  }

  // Every held position of every live sequence holds its expected KV.
  void verify() {
    kv.check_integrity();
    for (const auto& [seq, all] : tokens) {
      const std::vector<uint64_t> want = expected_kv(ns, all);
      for (size_t g = 0; g < spec.groups.size(); ++g) {
        const auto& table = kv.block_table(seq, static_cast<int64_t>(g));
        for (int64_t pos = 0; pos < kv.num_computed(seq); ++pos) {
          if (table[static_cast<size_t>(pos / kB)] < 0) continue;
          for (int64_t part = 0; part < layout.parts[g]; ++part) {
            ASSERT_EQ(memory[static_cast<size_t>(kv.slot(seq, static_cast<int64_t>(g), part, pos))], want[pos])
                << "sequence " << seq << " group " << g << " part " << part << " position " << pos;
          }
        }
      }
    }
  }
};

TEST(KvCoordinator, SlidingGroupReleasesOutOfWindowBlocksAndStillPrefixCaches) {
  Harness h(make_spec(1, 1, 33), 64);  // sliding: the last ceil(32 / 16) = 2 blocks before a hit
  const std::vector<int32_t> prompt = iota_tokens(160, 100);
  const KvSeqId a = h.admit(prompt);
  ASSERT_GE(a, 0);
  // The next query (position 160) reads [128, 160]: blocks 0..7 of the sliding group are gone.
  EXPECT_EQ(h.kv.num_held_blocks(a, 0), 2);
  EXPECT_EQ(h.kv.num_held_blocks(a, 1), 10);
  EXPECT_EQ(h.kv.stats().num_window_releases, 8);
  h.verify();
  h.free(a);
  // A follow-up turn: the 160 tokens plus 20 more hit all 10 blocks.
  std::vector<int32_t> turn2 = prompt;
  for (int32_t t : iota_tokens(20, 900)) turn2.push_back(t);
  int64_t hit = 0;
  const KvSeqId b = h.admit(turn2, &hit);
  EXPECT_EQ(hit, 160);
  // After the 20 new tokens the next query reads [148, 180]: sliding blocks 0..8 are holes.
  EXPECT_EQ(h.kv.block_table(b, 0)[8], -1);
  EXPECT_GE(h.kv.block_table(b, 0)[9], 0);
  EXPECT_EQ(h.kv.num_held_blocks(b, 1), 12);
  h.verify();
}

TEST(KvCoordinator, AHitIsTheLongestLengthEveryGroupAccepts) {
  Harness h(make_spec(1, 1, 33), 64);
  const std::vector<int32_t> prompt = iota_tokens(160, 100);
  h.free(h.admit(prompt));
  // Eviction order: blocks a window released first (the filler's 20, then the prompt's sliding
  // 0..7), then blocks freed with their sequence, tail first (sliding 9, full 9, sliding 8, ...).
  const int64_t before = h.kv.stats().num_evictions;
  const int64_t filler_len = (h.kv.num_free_pages() / 2) * kB;  // takes every free page
  const KvSeqId f = h.admit(iota_tokens(filler_len, 20000));
  ASSERT_GE(f, 0);
  ASSERT_EQ(h.kv.num_free_pages(), 0);
  const KvSeqId o = h.admit(iota_tokens(16 * kB, 5000));  // 32 pages: 20 + 8 + 4 evictions
  ASSERT_GE(o, 0);
  EXPECT_EQ(h.kv.stats().num_evictions - before, 32);
  h.verify();
  // Full accepts 8 blocks; the sliding group needs blocks 6 and 7 before L = 8 (evicted), and
  // no shorter L has its two blocks either (0..7 were evicted): the hit is 0, not 8.
  std::vector<int32_t> again = prompt;
  again.push_back(1);
  KvGroupMatch m = h.kv.match_prefix(again, h.ns);
  EXPECT_EQ(m.num_tokens(), 0);
}

TEST(KvCoordinator, ForkCopiesTheSharedPartialBlockInEveryGroup) {
  Harness h(make_spec(1, 2, 40), 64);
  const KvSeqId a = h.admit(iota_tokens(40, 1));  // 2.5 blocks
  const KvSeqId b = h.kv.fork(a);
  h.tokens[b] = h.tokens[a];
  const int32_t t = 7;
  ASSERT_TRUE(h.step(b, std::span<const int32_t>(&t, 1)));
  EXPECT_EQ(h.kv.stats().num_cow_copies, 2);  // one per group
  const int32_t u = 8;
  ASSERT_TRUE(h.step(a, std::span<const int32_t>(&u, 1)));
  EXPECT_EQ(h.kv.stats().num_cow_copies, 2);  // a holds its block alone now
  h.verify();
}

TEST(KvCoordinator, OutOfPagesIsAnAnswerThatChangesNothing) {
  Harness h(make_spec(1, 1, 1000), 8);  // 2 pages per block position: 4 blocks of 16 tokens
  const KvSeqId a = h.admit(iota_tokens(64, 1));
  ASSERT_GE(a, 0);
  EXPECT_EQ(h.kv.num_available_pages(), 0);
  const int32_t t = 3;
  EXPECT_FALSE(h.kv.plan(a, 1).fits());
  EXPECT_FALSE(h.step(a, std::span<const int32_t>(&t, 1)));
  EXPECT_EQ(h.kv.length(a), 64);
  EXPECT_EQ(h.admit(iota_tokens(20, 500)), -1);
  h.verify();
}

TEST(KvCoordinator, PinnedMatchesAreNeverEvicted) {
  Harness h(make_spec(1, 1, 33), 12);  // 6 block positions
  const std::vector<int32_t> prompt = iota_tokens(64, 100);
  h.free(h.admit(prompt));
  std::vector<int32_t> again = prompt;
  again.push_back(0);
  KvGroupMatch m = h.kv.match_prefix(again, h.ns);
  ASSERT_EQ(m.num_tokens(), 64);
  // Pinned: full 4 blocks, sliding 2 (the window before 64); the two released sliding blocks
  // are evictable, so 4 pages of 12 stay available beyond the free ones.
  EXPECT_EQ(h.kv.num_available_pages(), h.kv.num_free_pages() + 2);
  EXPECT_EQ(h.admit(iota_tokens(80, 7000)), -1);  // 5 positions x 2 pages > available
  h.kv.check_integrity();
  m.reset();
  h.kv.check_integrity();
}

void random_run(uint64_t seed, const KvCacheSpec& spec, int64_t num_pages) {
  Harness h(spec, num_pages);
  Rng rng(seed);
  auto below = [&](int64_t n) { return static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(n)); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 4; ++i) prefixes.push_back(iota_tokens(kB * (1 + below(8)), 1000 * (i + 1)));
  for (int op = 0; op < 600; ++op) {
    const int64_t what = below(10);
    if (what < 4 || h.tokens.empty()) {
      std::vector<int32_t> prompt = prefixes[static_cast<size_t>(below(4))];
      prompt.resize(static_cast<size_t>(below(static_cast<int64_t>(prompt.size())) + 1));
      const int64_t extra = below(3 * kB);
      for (int64_t i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(below(50)));
      int64_t hit = 0;
      const KvSeqId s = h.admit(prompt, &hit);
      EXPECT_LT(hit, static_cast<int64_t>(prompt.size()));
      (void)s;
    } else {
      auto it = h.tokens.begin();
      std::advance(it, below(static_cast<int64_t>(h.tokens.size())));
      const KvSeqId s = it->first;
      if (what < 7) {
        const int32_t t = static_cast<int32_t>(below(50));
        if (!h.step(s, std::span<const int32_t>(&t, 1))) h.free(s);
      } else if (what < 8 && static_cast<int64_t>(h.tokens.size()) < 6) {
        const KvSeqId c = h.kv.fork(s);
        h.tokens[c] = it->second;
      } else if (what < 9) {
        h.free(s);
      } else if (below(10) == 0) {
        h.kv.evict_all_cached();
      }
    }
    h.verify();
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(h.kv.stats().num_hit_tokens, 0);
  EXPECT_GT(h.kv.stats().num_evictions, 0);
}

TEST(KvCoordinatorRandom, FullAndSlidingGroupsKeepEveryHeldPositionsKv) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    random_run(seed, make_spec(1, 2, 1 + static_cast<int64_t>(seed) * 13), 48);
  }
}

TEST(KvCoordinatorRandom, SlidingOnlyAndFullOnlySpecs) {
  random_run(11, make_spec(0, 3, 20), 40);
  random_run(12, make_spec(2, 0, 0), 40);
}

}  // namespace
}  // namespace pagoda::kvcache
