#include "kvcache/disk_slots.h"

#include <gtest/gtest.h>

#include <set>

#include "core/rng.h"

namespace pagoda::kvcache {
namespace {

TEST(RunAllocator, HandsOutConsecutiveRunsInOrder) {
  RunAllocator a(10);
  EXPECT_EQ(a.num_free(), 10);
  RunAllocator::Run r = a.allocate(4);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.count, 4);
  r = a.allocate(3);
  EXPECT_EQ(r.first, 4);
  EXPECT_EQ(r.count, 3);
  a.release(0, 4);
  // From the cursor (7) there are 3 free; a run of 4 is found from the start.
  r = a.allocate(4);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.count, 4);
  // Nothing of 3 anywhere: the longest free run.
  r = a.allocate(5);
  EXPECT_EQ(r.first, 7);
  EXPECT_EQ(r.count, 3);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.allocate(1).count, 0);
}

TEST(RunAllocator, SeesARunAcrossTheCursorWhole) {
  RunAllocator a(8);
  ASSERT_EQ(a.allocate(3).count, 3);  // cursor at 3
  a.release(0, 3);                    // everything free again, cursor still at 3
  const RunAllocator::Run r = a.allocate(8);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.count, 8);
}

TEST(RunAllocator, RandomAllocationsMatchABitmapReference) {
  constexpr int64_t kUnits = 200;  // spans several 64-bit words
  RunAllocator a(kUnits);
  std::vector<bool> used(kUnits, false);
  std::vector<RunAllocator::Run> runs;
  Rng rng(5);
  for (int step = 0; step < 5000; ++step) {
    if (rng.next_u64() % 2 == 0 || runs.empty()) {
      const int64_t want = 1 + static_cast<int64_t>(rng.next_u64() % 70);
      int64_t longest = 0;
      for (int64_t u = 0, run = 0; u < kUnits; ++u) {
        run = used[u] ? 0 : run + 1;
        longest = std::max(longest, run);
      }
      const RunAllocator::Run r = a.allocate(want);
      EXPECT_EQ(r.count, std::min(want, longest)) << "step " << step;
      for (int64_t u = r.first; u < r.first + r.count; ++u) {
        ASSERT_FALSE(used[u]) << "unit " << u << " handed out twice";
        used[u] = true;
      }
      if (r.count > 0) runs.push_back(r);
    } else {
      const size_t i = rng.next_u64() % runs.size();
      a.release(runs[i].first, runs[i].count);
      for (int64_t u = runs[i].first; u < runs[i].first + runs[i].count; ++u) used[u] = false;
      runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
    }
    int64_t free = 0;
    for (int64_t u = 0; u < kUnits; ++u) {
      free += !used[u];
      ASSERT_EQ(a.is_free(u), !used[u]);
    }
    ASSERT_EQ(a.num_free(), free);
  }
}

TEST(SlotTable, WriteCommitPinEvictLifecycle) {
  SlotTable t(4, EvictionPolicyKind::kLru);
  const RunAllocator::Run r = t.allocate(2);
  ASSERT_EQ(r.count, 2);
  t.begin_write(0, 100, 0);
  t.begin_write(1, 101, 0);
  EXPECT_FALSE(t.find(100));
  EXPECT_EQ(t.find_writing(100), 0);
  t.begin_commit(0);
  EXPECT_FALSE(t.find(100));
  t.commit(0);
  EXPECT_EQ(t.find(100), 0);
  EXPECT_FALSE(t.find_writing(100));
  t.release(1);  // the write of 101 failed
  EXPECT_FALSE(t.find_writing(101));
  t.check_integrity();
  EXPECT_EQ(t.victim(), 0);
  t.pin(0);
  EXPECT_FALSE(t.victim()) << "a pinned slot is never a victim";
  EXPECT_FALSE(t.unpin(0));
  EXPECT_EQ(t.victim(), 0);
  t.evict(0, /*demote=*/true);
  EXPECT_FALSE(t.find(100));
  EXPECT_EQ(t.num_incoming(), 1);
  t.release(0);
  EXPECT_EQ(t.num_free(), 4);
  t.check_integrity();
}

TEST(SlotTable, DoomedSlotIsInvalidatedAfterItsLastRead) {
  SlotTable t(2, EvictionPolicyKind::kLru);
  t.adopt(1, 7);
  t.pin(1);
  t.pin(1);
  t.doom(1);
  EXPECT_FALSE(t.find(7));
  EXPECT_FALSE(t.unpin(1));
  EXPECT_TRUE(t.unpin(1)) << "the last read of a doomed slot says: invalidate it";
  t.begin_invalidate(1);
  EXPECT_EQ(t.num_incoming(), 1);
  t.check_integrity();
  t.release(1);
  t.check_integrity();
}

TEST(SlotTable, PriorityThenRecencyOrdersVictims) {
  SlotTable t(3, EvictionPolicyKind::kPriority);
  for (int64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(t.allocate(1).first, s);
    t.begin_write(s, 10 + static_cast<BlockHash>(s), s == 0 ? 5 : 0);
    t.begin_commit(s);
    t.commit(s);
  }
  EXPECT_EQ(t.victim(), 1);  // slot 0 is older but has priority 5
  t.touch(1, 0);
  EXPECT_EQ(t.victim(), 2);
  t.touch(2, 9);  // a put at a higher priority raises it
  EXPECT_EQ(t.victim(), 1);
  t.check_integrity();
}

}  // namespace
}  // namespace pagoda::kvcache
