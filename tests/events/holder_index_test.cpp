// The router's inverted index (events/holder_index.h) against the per-worker indexes it is fed
// by: after random stores, removals, clears and snapshot resets in several media, matching a
// chain against all workers at once gives each worker exactly BlockIndex::matched_blocks, and
// every hash has exactly the holders that hold it in some medium.
#include "events/holder_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/rng.h"
#include "events/block_index.h"

namespace pagoda::events {
namespace {

TEST(HolderIndex, AddAndRemoveAreIdempotentAndMoveBetweenOneAndManyHolders) {
  HolderIndex h;
  h.add(7, 1);
  h.add(7, 1);
  EXPECT_EQ(h.num_holders(7), 1);
  h.add(7, 3);
  h.add(7, 3);
  EXPECT_EQ(h.num_holders(7), 2);
  h.remove(7, 5);  // not a holder
  EXPECT_EQ(h.num_holders(7), 2);
  h.remove(7, 1);
  EXPECT_EQ(h.num_holders(7), 1);
  std::vector<int64_t> matched(4);
  const std::vector<uint64_t> chain = {7};
  h.match(chain, matched);
  EXPECT_EQ(matched, (std::vector<int64_t>{0, 0, 0, 1}));
  h.remove(7, 3);
  h.remove(7, 3);
  EXPECT_EQ(h.num_hashes(), 0);
  h.match(chain, matched);
  EXPECT_EQ(matched, (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(HolderIndex, MatchesEveryWorkerAsItsOwnIndexDoes) {
  constexpr int kWorkers = 12;
  constexpr uint64_t kHashes = 40;  // few, so that workers share them and chains match deep
  HolderIndex holders;
  std::vector<std::unique_ptr<BlockIndex>> own;
  for (int w = 0; w < kWorkers; ++w) own.push_back(std::make_unique<BlockIndex>(&holders, w));
  const char* media[] = {"GPU", "CPU", "DISK"};
  Rng rng(17);
  for (int step = 0; step < 4000; ++step) {
    BlockIndex& idx = *own[rng.next_u64() % kWorkers];
    const char* medium = media[rng.next_u64() % 3];
    std::vector<uint64_t> some;
    for (uint64_t n = rng.next_u64() % 6; n > 0; --n) some.push_back(rng.next_u64() % kHashes);
    const uint64_t op = rng.next_u64() % 100;
    if (op < 55) {
      idx.insert(medium, some);
    } else if (op < 93) {
      idx.erase(medium, some);
    } else if (op < 95) {
      idx.clear();
    } else if (op < 97) {
      KvEvent e;
      e.type = KvEventType::kAllBlocksCleared;
      idx.apply(e);
    } else {
      KvEventsSnapshot snap;
      snap.media.push_back(MediumBlocks{"CPU", some});
      idx.reset(snap);
    }
    if (step % 50 != 0) continue;
    for (uint64_t hash = 0; hash < kHashes; ++hash) {
      int64_t want = 0;
      for (int w = 0; w < kWorkers; ++w) {
        bool held = false;
        for (const char* m : media) held = held || own[w]->contains(m, hash);
        want += held ? 1 : 0;
      }
      ASSERT_EQ(holders.num_holders(hash), want) << "hash " << hash << " step " << step;
    }
    for (int c = 0; c < 20; ++c) {
      std::vector<uint64_t> chain;
      for (uint64_t n = 1 + rng.next_u64() % 8; n > 0; --n) chain.push_back(rng.next_u64() % kHashes);
      std::vector<int64_t> matched(kWorkers - 2);  // the last two workers are outside the range
      holders.match(chain, matched);
      for (int w = 0; w < kWorkers - 2; ++w) {
        ASSERT_EQ(matched[w], own[w]->matched_blocks(chain)) << "worker " << w << " step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::events
