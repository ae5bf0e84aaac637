// A per-instance block index rebuilt from events, and the snapshot a resync loads.
#include "events/block_index.h"

#include <gtest/gtest.h>

namespace pagoda::events {
namespace {

KvEvent stored(std::vector<uint64_t> hashes, const char* medium) {
  KvEvent e;
  e.type = KvEventType::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.medium = medium;
  return e;
}

TEST(BlockIndex, EventsBuildIt) {
  BlockIndex index;
  KvEventBatch b;
  b.events = {stored({1, 2, 3}, "GPU"), stored({4}, "CPU")};
  index.apply(b);
  const std::vector<uint64_t> chain = {1, 2, 3, 4, 5};
  EXPECT_EQ(index.matched_blocks(chain), 4);  // 1-3 on the GPU, 4 in the CPU tier
  EXPECT_EQ(index.num_blocks("GPU"), 3);
  EXPECT_EQ(index.num_blocks(), 4);
  KvEvent removed;
  removed.type = KvEventType::kBlockRemoved;
  removed.block_hashes = {2};
  removed.medium = "GPU";
  index.apply(removed);
  EXPECT_EQ(index.matched_blocks(chain), 1);  // the chain breaks at 2
  EXPECT_EQ(index.matched_blocks(std::vector<uint64_t>{9, 1}), 0);
  KvEvent no_medium = stored({2}, "GPU");
  no_medium.medium.reset();  // the device pool
  index.apply(no_medium);
  EXPECT_TRUE(index.contains("GPU", 2));
  KvEvent cleared;
  cleared.type = KvEventType::kAllBlocksCleared;
  index.apply(cleared);
  EXPECT_EQ(index.num_blocks(), 0);
}

TEST(BlockIndex, SnapshotRoundTripsThroughJson) {
  BlockIndex index;
  index.insert("GPU", std::vector<uint64_t>{0xffffffffffffffffull, 7});
  index.insert("DISK", std::vector<uint64_t>{0});
  const KvEventsSnapshot s = index.snapshot(41);
  auto back = snapshot_from_json(snapshot_to_json(s));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->seq, 41);
  BlockIndex other;
  other.insert("CPU", std::vector<uint64_t>{99});
  other.reset(*back);
  EXPECT_TRUE(other.contains("GPU", 0xffffffffffffffffull));
  EXPECT_TRUE(other.contains("GPU", 7));
  EXPECT_TRUE(other.contains("DISK", 0));
  EXPECT_FALSE(other.contains("CPU", 99));  // reset replaces everything
  EXPECT_NE(snapshot_to_json(s).find("\"ffffffffffffffff\""), std::string::npos);
}

TEST(BlockIndex, BadSnapshotsAreErrors) {
  for (const char* bad : {"", "[]", R"({"seq":1})", R"({"seq":"1","media":{}})", R"({"seq":1,"media":{"GPU":3}})",
                          R"({"seq":1,"media":{"GPU":[12]}})", R"({"seq":1,"media":{"GPU":["xyz"]}})",
                          R"({"seq":1,"media":{"GPU":["00000000000000001"]}})"}) {
    EXPECT_FALSE(snapshot_from_json(bad).is_ok()) << bad;
  }
}

}  // namespace
}  // namespace pagoda::events
