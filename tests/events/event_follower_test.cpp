// The sequence logic of a subscriber: apply in order, skip what a snapshot covered, report gaps,
// notice a restarted publisher and undecodable batches.
#include "events/event_follower.h"

#include <gtest/gtest.h>

#include "zmq_test_util.h"

namespace pagoda::events {
namespace {

using testing::batch_storing;

using V = EventFollower::Verdict;

TEST(EventFollower, AppliesInOrderAfterASnapshot) {
  BlockIndex index;
  EventFollower f(index);
  EXPECT_EQ(f.on_batch(0, batch_storing(1)), V::kUnsynced);  // nothing trusted before a snapshot
  KvEventsSnapshot s;
  s.seq = 4;
  s.media = {{"GPU", {10}}};
  f.reset(s);
  EXPECT_EQ(f.next_seq(), 5);
  EXPECT_EQ(f.on_batch(3, batch_storing(3)), V::kStale);   // queued before the snapshot
  EXPECT_EQ(f.on_batch(4, batch_storing(4)), V::kStale);
  EXPECT_EQ(f.on_batch(5, batch_storing(5)), V::kApplied);
  EXPECT_EQ(f.on_batch(6, batch_storing(6)), V::kApplied);
  EXPECT_TRUE(index.contains("GPU", 10));
  EXPECT_TRUE(index.contains("GPU", 6));
  EXPECT_FALSE(index.contains("GPU", 4));
  EXPECT_EQ(f.batches_applied(), 2);
}

TEST(EventFollower, AGapIsFilledByReplayThenTheLiveBatch) {
  BlockIndex index;
  EventFollower f(index);
  f.reset(KvEventsSnapshot{0, {}});
  EXPECT_EQ(f.on_batch(1, batch_storing(1)), V::kApplied);
  EXPECT_EQ(f.on_batch(4, batch_storing(4)), V::kGap);  // 2 and 3 missing; nothing applied
  EXPECT_FALSE(index.contains("GPU", 4));
  EXPECT_EQ(f.on_replayed(1, batch_storing(1)), V::kStale);
  EXPECT_EQ(f.on_replayed(2, batch_storing(2)), V::kApplied);
  EXPECT_EQ(f.on_replayed(3, batch_storing(3)), V::kApplied);
  EXPECT_EQ(f.on_replayed(4, batch_storing(4)), V::kApplied);  // the replay had it too
  EXPECT_EQ(f.on_replayed(4, batch_storing(4)), V::kStale);    // the live batch retried
  EXPECT_EQ(f.on_batch(5, batch_storing(5)), V::kApplied);
  // A replay that starts above what is missing cannot fill the gap.
  EXPECT_EQ(f.on_batch(8, batch_storing(8)), V::kGap);
  EXPECT_EQ(f.on_replayed(7, batch_storing(7)), V::kGap);
}

TEST(EventFollower, ARestartedPublisherAndGarbageUnsync) {
  BlockIndex index;
  EventFollower f(index);
  f.reset(KvEventsSnapshot{-1, {}});
  EXPECT_EQ(f.on_batch(0, batch_storing(1)), V::kApplied);
  EXPECT_EQ(f.on_batch(1, batch_storing(2)), V::kApplied);
  EXPECT_EQ(f.on_batch(0, batch_storing(3)), V::kRestarted);  // the stream went backwards
  EXPECT_FALSE(f.synced());
  EXPECT_EQ(index.num_blocks(), 0);  // nothing stale is trusted
  f.reset(KvEventsSnapshot{0, {{"GPU", {3}}}});
  EXPECT_EQ(f.on_batch(1, "\xc1"), V::kMalformed);
  EXPECT_FALSE(f.synced());
  EXPECT_EQ(index.num_blocks(), 0);
}

}  // namespace
}  // namespace pagoda::events
