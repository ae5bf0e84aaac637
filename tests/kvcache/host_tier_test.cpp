// The host DRAM tier: records round-trip byte for byte, eviction order and demotion through the
// callback, refresh of held blocks, corrupt records dropped and counted, sizing errors.
#include "kvcache/host_tier.h"

#include <gtest/gtest.h>

#include "disk_test_util.h"

namespace pagoda::kvcache {
namespace {

using namespace disk_test;  // NOLINT: chains, puts, destinations

class HostTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<HostTier> make(int64_t capacity_blocks, const KvLayout& l = small_layout()) {
    const int64_t slot = (record_bytes(record_meta_for(l)) + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
    HostTierOptions o;
    o.capacity_bytes = capacity_blocks * slot + slot / 2;  // rounded down to whole slots
    o.layout = l;
    Result<std::unique_ptr<HostTier>> tier = HostTier::create(o, clock_);
    EXPECT_TRUE(tier.is_ok()) << tier.status().message();
    return std::move(tier).value();
  }
  // Every op completes during the call and is reported by the next poll, exactly once.
  TierCompletion done(HostTier& tier, TierOpId id) {
    std::vector<TierCompletion> out;
    tier.poll(out);
    tier.check_integrity();
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out.at(0).op, id);
    std::vector<TierCompletion> again;
    tier.poll(again);
    EXPECT_TRUE(again.empty());
    return out.at(0);
  }
  // Puts one block (the TierPut's spans point into `b`, which outlives the call).
  TierCompletion put_one(HostTier& tier, const TestBlock& b, int32_t priority = 0) {
    const std::vector<TierPut> puts{TierPut{b.meta, b.tokens, b.segs, priority}};
    return done(tier, tier.put(puts));
  }
  int64_t held(HostTier& tier, const std::vector<TestBlock>& chain) {
    const std::vector<BlockHash> h = hashes_of(chain);
    return done(tier, tier.lookup(h)).num_ok;
  }
  ManualClock clock_;
};

TEST_F(HostTierTest, RoundTripsRecordsByteForByte) {
  auto tier = make(8);
  EXPECT_EQ(tier->num_slots(), 8);
  const auto chain = make_chain(small_layout(), 5, 1);
  const auto puts = puts_of(chain);
  const TierCompletion put = done(*tier, tier->put(puts));
  EXPECT_EQ(put.num_ok, 5);
  EXPECT_TRUE(put.status.is_ok());
  EXPECT_EQ(held(*tier, chain), 5);
  auto dests = dests_for(small_layout(), 5);
  const auto gets = gets_of(chain, dests);
  const TierCompletion get = done(*tier, tier->get(gets));
  EXPECT_EQ(get.num_ok, 5);
  for (size_t i = 0; i < chain.size(); ++i) EXPECT_TRUE(dests[i].holds(chain[i])) << i;
  const TierStats s = tier->stats();
  EXPECT_EQ(s.used_blocks, 5);
  EXPECT_EQ(s.put_blocks, 5);
  EXPECT_EQ(s.get_blocks, 5);
  EXPECT_EQ(s.bytes_read, 5 * chain[0].meta.payload_bytes);
  EXPECT_GT(s.bytes_written, s.bytes_read);  // whole records: header + tokens + payload
}

TEST_F(HostTierTest, LookupAndGetStopAtTheFirstMiss) {
  auto tier = make(8);
  const auto chain = make_chain(small_layout(), 4, 2);
  const std::vector<TestBlock> first_two(chain.begin(), chain.begin() + 2);
  const auto puts = puts_of(first_two);
  done(*tier, tier->put(puts));
  EXPECT_EQ(held(*tier, chain), 2);
  auto dests = dests_for(small_layout(), 4);
  const auto gets = gets_of(chain, dests);
  const TierCompletion get = done(*tier, tier->get(gets));
  EXPECT_EQ(get.num_ok, 2);
  EXPECT_TRUE(get.status.is_ok()) << "a miss is not an error";
  EXPECT_TRUE(dests[2].untouched() && dests[3].untouched());
}

TEST_F(HostTierTest, EvictsLeastRecentlyUsedIntoTheCallback) {
  auto tier = make(3);
  std::vector<BlockHash> demoted;
  std::vector<std::vector<int32_t>> demoted_tokens;
  tier->set_eviction_callback([&](const BlockRecordView& r, int32_t) {
    demoted.push_back(r.meta.block_hash);
    demoted_tokens.emplace_back(r.tokens.begin(), r.tokens.end());
  });
  const auto chain = make_chain(small_layout(), 5, 3);
  for (const TestBlock& b : chain) put_one(*tier, b);
  ASSERT_EQ(demoted.size(), 2u);
  EXPECT_EQ(demoted[0], chain[0].meta.block_hash);
  EXPECT_EQ(demoted[1], chain[1].meta.block_hash);
  EXPECT_EQ(demoted_tokens[0], chain[0].tokens);
  EXPECT_EQ(tier->stats().evictions, 2);
  EXPECT_EQ(tier->stats().used_blocks, 3);
  // A get touches: chain[2] becomes the most recent, so chain[3] goes next.
  auto dests = dests_for(small_layout(), 1);
  const std::vector<TestBlock> third{chain[2]};
  const auto gets = gets_of(third, dests);
  EXPECT_EQ(done(*tier, tier->get(gets)).num_ok, 1);
  const auto more = make_chain(small_layout(), 1, 4);
  put_one(*tier, more[0]);
  ASSERT_EQ(demoted.size(), 3u);
  EXPECT_EQ(demoted[2], chain[3].meta.block_hash);
}

TEST_F(HostTierTest, HigherPriorityIsKeptLonger) {
  auto tier = make(2);
  const auto chain = make_chain(small_layout(), 3, 5);
  put_one(*tier, chain[0], /*priority=*/5);
  put_one(*tier, chain[1]);
  put_one(*tier, chain[2]);
  EXPECT_EQ(held(*tier, {chain[0]}), 1) << "the high-priority block survives";
  EXPECT_EQ(held(*tier, {chain[1]}), 0);
}

TEST_F(HostTierTest, PutOfAHeldBlockRefreshesIt) {
  auto tier = make(2);
  const auto chain = make_chain(small_layout(), 3, 6);
  put_one(*tier, chain[0]);
  put_one(*tier, chain[1]);
  put_one(*tier, chain[0]);  // refresh: chain[0] is now the most recent
  EXPECT_EQ(tier->stats().used_blocks, 2);
  put_one(*tier, chain[2]);
  EXPECT_EQ(held(*tier, {chain[0]}), 1);
  EXPECT_EQ(held(*tier, {chain[1]}), 0);
}

TEST_F(HostTierTest, CorruptRecordIsDroppedCountedAndNeverCopied) {
  auto tier = make(4);
  const auto chain = make_chain(small_layout(), 3, 7);
  const auto puts = puts_of(chain);
  done(*tier, tier->put(puts));
  std::optional<ByteSpan> bytes = tier->record_bytes_for_test(chain[1].meta.block_hash);
  ASSERT_TRUE(bytes.has_value());
  (*bytes)[bytes->size() - 1] ^= 0x01;  // one payload bit
  auto dests = dests_for(small_layout(), 3);
  const auto gets = gets_of(chain, dests);
  const TierCompletion get = done(*tier, tier->get(gets));
  EXPECT_EQ(get.num_ok, 1);
  EXPECT_FALSE(get.status.is_ok());
  EXPECT_TRUE(dests[1].untouched());
  EXPECT_TRUE(dests[2].untouched());
  EXPECT_EQ(tier->stats().corrupt_records, 1);
  EXPECT_EQ(held(*tier, chain), 1) << "the corrupt record is gone";
}

TEST_F(HostTierTest, CorruptVictimIsNeverDemoted) {
  auto tier = make(1);
  int demotions = 0;
  tier->set_eviction_callback([&](const BlockRecordView&, int32_t) { ++demotions; });
  const auto chain = make_chain(small_layout(), 2, 8);
  put_one(*tier, chain[0]);
  (*tier->record_bytes_for_test(chain[0].meta.block_hash))[200] ^= 0x02;
  put_one(*tier, chain[1]);
  EXPECT_EQ(demotions, 0);
  EXPECT_EQ(tier->stats().corrupt_records, 1);
}

TEST_F(HostTierTest, RejectsBlocksOfAnotherShapeAndTinyCapacity) {
  auto tier = make(4);
  const auto other = make_chain(small_layout(kernels::KvDType::kF32, 8), 1, 9);
  const auto puts = puts_of(other);
  const TierCompletion put = done(*tier, tier->put(puts));
  EXPECT_EQ(put.num_ok, 0);
  EXPECT_FALSE(put.status.is_ok());
  HostTierOptions o;
  o.layout = small_layout();
  o.capacity_bytes = 100;
  Result<std::unique_ptr<HostTier>> none = HostTier::create(o, clock_);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("holds no KV block"), std::string::npos);
}

TEST_F(HostTierTest, EraseDropsAtOnce) {
  auto tier = make(4);
  const auto chain = make_chain(small_layout(), 2, 10);
  const auto puts = puts_of(chain);
  done(*tier, tier->put(puts));
  const std::vector<BlockHash> first{chain[0].meta.block_hash};
  tier->erase(first);
  tier->check_integrity();
  EXPECT_EQ(held(*tier, chain), 0);
  EXPECT_EQ(tier->stats().used_blocks, 1);
}

}  // namespace
}  // namespace pagoda::kvcache
