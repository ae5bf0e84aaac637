#include "transfer/lease_table.h"

#include <gtest/gtest.h>

namespace pagoda::transfer {
namespace {

constexpr int64_t kTtl = 1'000'000'000;

TEST(LeaseTable, ConfirmEndsTheLeaseAndBumpsGenerations) {
  ManualClock clock;
  LeaseTable t(8, clock, kTtl);
  const int32_t blocks[] = {3, 5};
  const Lease lease = t.grant(blocks);
  EXPECT_EQ(lease.blocks.size(), 2u);
  EXPECT_EQ(t.stats().active, 1);
  const uint64_t g3 = t.generation(3);
  EXPECT_TRUE(t.confirm(lease.id, lease.blocks).is_ok());
  EXPECT_EQ(t.generation(3), g3 + 1);  // may be reused once unpinned
  EXPECT_EQ(t.stats().active, 0);
  EXPECT_EQ(t.stats().held, 1);        // pins held until reaped
  EXPECT_EQ(t.take_ended(), std::vector<uint64_t>{lease.id});
  EXPECT_EQ(t.stats().held, 0);
  // A second confirm of the same lease is refused: the blocks may be gone.
  EXPECT_EQ(t.confirm(lease.id, lease.blocks).code(), StatusCode::kNotFound);
}

TEST(LeaseTable, ExpiredLeaseIsRefusedAndReaped) {
  ManualClock clock;
  LeaseTable t(4, clock, kTtl);
  const int32_t blocks[] = {1};
  const Lease lease = t.grant(blocks);
  EXPECT_EQ(t.next_deadline_ns(), kTtl);
  clock.advance_ns(kTtl - 1);
  EXPECT_TRUE(t.take_ended().empty());
  clock.advance_ns(1);
  EXPECT_EQ(t.take_ended(), std::vector<uint64_t>{lease.id});
  EXPECT_EQ(t.stats().expired, 1);
  EXPECT_EQ(t.confirm(lease.id, lease.blocks).code(), StatusCode::kNotFound);
  EXPECT_EQ(t.next_deadline_ns(), INT64_MAX);
}

TEST(LeaseTable, ConfirmAfterExpiryBeforeReapIsRefused) {
  ManualClock clock;
  LeaseTable t(4, clock, kTtl);
  const int32_t blocks[] = {0, 1};
  const Lease lease = t.grant(blocks);
  clock.advance_ns(kTtl);
  EXPECT_EQ(t.confirm(lease.id, lease.blocks).code(), StatusCode::kUnavailable);
  EXPECT_EQ(t.take_ended().size(), 1u);
}

TEST(LeaseTable, StaleGenerationIsRefused) {
  ManualClock clock;
  LeaseTable t(4, clock, kTtl);
  const int32_t blocks[] = {2};
  const Lease first = t.grant(blocks);
  ASSERT_TRUE(t.confirm(first.id, first.blocks).is_ok());
  t.take_ended();  // block 2 may now be reused; a new lease names a new generation
  const Lease second = t.grant(blocks);
  EXPECT_NE(second.blocks[0].generation, first.blocks[0].generation);
  // The old reference, presented under the new lease, must not pass.
  EXPECT_EQ(t.confirm(second.id, first.blocks).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.stats().refused, 1);
}

TEST(LeaseTable, OverlappingLeasesKeepTheGenerationUntilTheLastEnds) {
  ManualClock clock;
  LeaseTable t(4, clock, kTtl);
  const int32_t blocks[] = {1, 2};
  const Lease a = t.grant(blocks);
  const Lease b = t.grant(blocks);  // a shared prefix lent twice
  ASSERT_TRUE(t.confirm(a.id, a.blocks).is_ok());
  EXPECT_TRUE(t.confirm(b.id, b.blocks).is_ok());  // still pinned by b: same generation
  EXPECT_EQ(t.generation(1), a.blocks[0].generation + 1);
}

TEST(LeaseTable, ForeignBlockIsRefused) {
  ManualClock clock;
  LeaseTable t(4, clock, kTtl);
  const int32_t blocks[] = {1};
  const Lease lease = t.grant(blocks);
  const BlockRef other[] = {{3, t.generation(3)}};
  EXPECT_EQ(t.confirm(lease.id, other).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::transfer
