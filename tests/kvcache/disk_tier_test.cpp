// The disk tier's ops over ManualIo: the test decides when each request completes and injects
// faults; every step ends with check_integrity.
#include "kvcache/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "disk_test_util.h"

namespace pagoda::kvcache {
namespace {

using namespace disk_test;  // NOLINT

class DiskTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<DiskTier> make(int64_t capacity_blocks, const KvLayout& l = small_layout(),
                                 const std::function<void(DiskTierOptions&)>& tweak = {}) {
    DiskTierOptions o = options_for(dir_.path, l, capacity_blocks);
    if (tweak) tweak(o);
    auto io = std::make_unique<ManualIo>(o.queue_depth);
    io_ = io.get();
    auto tier = open_tier(o, clock_, log_.logger, std::move(io));
    io_->log.clear();
    return tier;
  }
  TierCompletion put(DiskTier& tier, const std::vector<TestBlock>& chain, int32_t priority = 0) {
    const std::vector<TierPut> puts = puts_of(chain, priority);
    return finish(tier, tier.put(puts), io_);
  }
  TierCompletion get(DiskTier& tier, const std::vector<TestBlock>& chain, std::vector<Dest>& dests) {
    const std::vector<TierGet> gets = gets_of(chain, dests);
    return finish(tier, tier.get(gets), io_);
  }
  int64_t held(DiskTier& tier, const std::vector<TestBlock>& chain) {
    const std::vector<BlockHash> hashes = hashes_of(chain);
    return finish(tier, tier.lookup(hashes), io_).num_ok;
  }
  // The first 4 bytes of slot `slot` on disk (a record's magic).
  uint32_t magic_on_disk(int64_t slot, const KvLayout& l = small_layout()) {
    const int fd = ::open(disk_tier_file_path(dir_.path, 0).c_str(), O_RDONLY);
    uint32_t magic = 0xFFFFFFFF;
    EXPECT_EQ(::pread(fd, &magic, 4, slot * slot_bytes_of(l)), 4);
    ::close(fd);
    return magic;
  }
  void flip_byte(int64_t offset) {
    const int fd = ::open(disk_tier_file_path(dir_.path, 0).c_str(), O_RDWR);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
    ::close(fd);
  }
  int64_t pending_index(IoOpcode opcode) {
    for (int64_t i = 0; i < io_->num_pending(); ++i) {
      if (io_->pending(i).opcode == opcode) return i;
    }
    return -1;
  }

  TempDir dir_;
  ManualClock clock_;
  LogCapture log_;
  ManualIo* io_ = nullptr;
};

TEST_F(DiskTierTest, RoundTripsEveryKvDType) {
  using kernels::KvDType;
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16, KvDType::kFp8E4M3, KvDType::kFp8E5M2, KvDType::kInt8,
                    KvDType::kInt4}) {
    SCOPED_TRACE(std::string(kernels::kv_dtype_name(d)));
    const KvLayout l = small_layout(d);
    auto tier = make(8, l);
    const auto chain = make_chain(l, 3, 7);
    const TierCompletion p = put(*tier, chain);
    EXPECT_EQ(p.num_ok, 3);
    EXPECT_EQ(p.bytes, 3 * record_bytes(record_meta_for(l)));
    EXPECT_EQ(held(*tier, chain), 3);
    std::vector<Dest> dests = dests_for(l, 3);
    const TierCompletion g = get(*tier, chain, dests);
    EXPECT_EQ(g.num_ok, 3) << g.status.message();
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(dests[i].holds(chain[i])) << "block " << i;
    EXPECT_EQ(tier->stats().bytes_read, 3 * record_bytes(record_meta_for(l)));
  }
}

TEST_F(DiskTierTest, RecordIsVisibleOnlyAfterItsCommitWrite) {
  auto tier = make(4);
  const auto chain = make_chain(small_layout(), 1, 1);
  const std::vector<TierPut> puts = puts_of(chain);
  const TierOpId id = tier->put(puts);
  ASSERT_EQ(io_->num_pending(), 1);  // the record, magic zeroed
  EXPECT_EQ(held(*tier, chain), 0);
  io_->complete_at(0);
  std::vector<TierCompletion> out;
  tier->poll(out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(magic_on_disk(0), 0u) << "a whole record without its magic is not a record yet";
  ASSERT_EQ(io_->num_pending(), 1);  // the commit: the first page again, with the magic
  EXPECT_EQ(io_->pending(0).len, kIoAlign);
  EXPECT_EQ(held(*tier, chain), 0);
  EXPECT_EQ(finish(*tier, id, io_).num_ok, 1);
  EXPECT_EQ(magic_on_disk(0), kBlockRecordMagic);
  EXPECT_EQ(held(*tier, chain), 1);
}

TEST_F(DiskTierTest, ChainIsWrittenAndReadWithOneRequest) {
  const int64_t slot = slot_bytes_of(small_layout());
  auto tier = make(32);
  const auto chain = make_chain(small_layout(), 8, 3);
  ASSERT_EQ(put(*tier, chain).num_ok, 8);
  ASSERT_EQ(io_->count(IoOpcode::kWrite), 1 + 8);  // one body write, eight commit pages
  EXPECT_EQ(io_->log[0].len, 8 * slot);
  io_->log.clear();
  std::vector<Dest> dests = dests_for(small_layout(), 8);
  ASSERT_EQ(get(*tier, chain, dests).num_ok, 8);
  ASSERT_EQ(io_->count(IoOpcode::kRead), 1);
  EXPECT_EQ(io_->log[0].len, 8 * slot);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(dests[i].holds(chain[i]));
}

TEST_F(DiskTierTest, RequestsAreCutAtMaxRequestBytes) {
  const int64_t slot = slot_bytes_of(small_layout());
  auto tier = make(32, small_layout(), [&](DiskTierOptions& o) { o.max_request_bytes = 3 * slot; });
  const auto chain = make_chain(small_layout(), 8, 3);
  ASSERT_EQ(put(*tier, chain).num_ok, 8);
  EXPECT_EQ(io_->count(IoOpcode::kWrite), 3 + 8);
  io_->log.clear();
  std::vector<Dest> dests = dests_for(small_layout(), 8);
  ASSERT_EQ(get(*tier, chain, dests).num_ok, 8);
  EXPECT_EQ(io_->count(IoOpcode::kRead), 3);  // 3 + 3 + 2 slots
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(dests[i].holds(chain[i]));
}

TEST_F(DiskTierTest, ReadsWaitForBounceBuffersAndGoInParts) {
  const int64_t slot = slot_bytes_of(small_layout());
  auto tier = make(32, small_layout(), [&](DiskTierOptions& o) { o.read_buffer_bytes = 3 * slot; });
  const auto chain = make_chain(small_layout(), 8, 4);
  ASSERT_EQ(put(*tier, chain).num_ok, 8);
  io_->log.clear();
  std::vector<Dest> dests = dests_for(small_layout(), 8);
  const std::vector<TierGet> gets = gets_of(chain, dests);
  const TierOpId id = tier->get(gets);
  EXPECT_EQ(io_->num_pending(), 1);  // three slots' worth of buffers: one read at a time
  EXPECT_EQ(io_->pending(0).len, 3 * slot);
  ASSERT_EQ(finish(*tier, id, io_).num_ok, 8);
  EXPECT_EQ(io_->count(IoOpcode::kRead), 3);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(dests[i].holds(chain[i]));
}

TEST_F(DiskTierTest, LeastRecentlyUsedIsEvictedFirst) {
  auto tier = make(4);
  std::vector<std::vector<TestBlock>> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(make_chain(small_layout(), 1, 100 + i));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(put(*tier, blocks[i]).num_ok, 1);
  std::vector<Dest> dests = dests_for(small_layout(), 1);
  ASSERT_EQ(get(*tier, blocks[0], dests).num_ok, 1);  // block 0 is now the most recent
  ASSERT_EQ(put(*tier, blocks[4]).num_ok, 1);         // evicts block 1
  EXPECT_EQ(held(*tier, blocks[1]), 0);
  for (int i : {0, 2, 3, 4}) EXPECT_EQ(held(*tier, blocks[i]), 1) << "block " << i;
  EXPECT_EQ(tier->stats().evictions, 1);
  EXPECT_EQ(tier->stats().used_blocks, 4);
  EXPECT_EQ(tier->stats().capacity_blocks, 4);
}

TEST_F(DiskTierTest, LowerPriorityIsEvictedFirst) {
  auto tier = make(3);
  std::vector<std::vector<TestBlock>> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(make_chain(small_layout(), 1, 200 + i));
  ASSERT_EQ(put(*tier, blocks[0], 5).num_ok, 1);  // oldest, but kept by its priority
  ASSERT_EQ(put(*tier, blocks[1], 0).num_ok, 1);
  ASSERT_EQ(put(*tier, blocks[2], 0).num_ok, 1);
  for (int i = 3; i < 6; ++i) {
    ASSERT_EQ(put(*tier, blocks[i], 0).num_ok, 1);
    EXPECT_EQ(held(*tier, blocks[0]), 1) << "after block " << i;
    EXPECT_EQ(held(*tier, blocks[i - 2]), 0) << "block " << i - 2 << " should have gone";
  }
}

TEST_F(DiskTierTest, EvictionCallbackGetsTheVerifiedVictim) {
  auto tier = make(2);
  struct Seen {
    BlockHash hash;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
    int32_t priority;
  };
  std::vector<Seen> seen;
  tier->set_eviction_callback([&](const BlockRecordView& r, int32_t priority) {
    seen.push_back({r.meta.block_hash, {r.tokens.begin(), r.tokens.end()}, {r.payload.begin(), r.payload.end()}, priority});
  });
  const auto a = make_chain(small_layout(), 1, 1), b = make_chain(small_layout(), 1, 2), c = make_chain(small_layout(), 1, 3);
  ASSERT_EQ(put(*tier, a, 2).num_ok, 1);
  ASSERT_EQ(put(*tier, b, 3).num_ok, 1);
  const std::vector<TierPut> puts = puts_of(c);
  const TierOpId id = tier->put(puts);
  EXPECT_TRUE(seen.empty()) << "the victim is read back first";
  EXPECT_EQ(held(*tier, a), 0) << "a victim leaves the index at once";
  ASSERT_EQ(finish(*tier, id, io_).num_ok, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].hash, a[0].meta.block_hash);
  EXPECT_EQ(seen[0].tokens, a[0].tokens);
  EXPECT_EQ(seen[0].payload, a[0].payload);
  EXPECT_EQ(seen[0].priority, 2);
  EXPECT_EQ(held(*tier, b), 1);
  EXPECT_EQ(held(*tier, c), 1);
}

TEST_F(DiskTierTest, SlotBeingReadIsNeverEvictedOrOverwritten) {
  auto tier = make(2);
  const auto a = make_chain(small_layout(), 1, 1), b = make_chain(small_layout(), 1, 2);
  const auto c = make_chain(small_layout(), 1, 3), d = make_chain(small_layout(), 1, 4);
  ASSERT_EQ(put(*tier, a).num_ok, 1);
  ASSERT_EQ(put(*tier, b).num_ok, 1);
  std::vector<Dest> dests = dests_for(small_layout(), 1);
  const std::vector<TierGet> gets = gets_of(a, dests);
  const TierOpId reading = tier->get(gets);  // a is pinned until this completes
  const std::vector<TierPut> put_c = puts_of(c), put_d = puts_of(d);
  const TierOpId pc = tier->put(put_c);  // takes b's slot (a, older, is being read)
  const TierOpId pd = tier->put(put_d);  // nothing left to evict
  auto done = finish_all(*tier, {reading, pc, pd}, io_);
  EXPECT_EQ(done[pd].num_ok, 0);
  EXPECT_EQ(done[pd].status.code(), StatusCode::kUnavailable) << done[pd].status.message();
  EXPECT_EQ(done[pc].num_ok, 1);
  const TierCompletion ca = done[reading];
  EXPECT_EQ(ca.num_ok, 1);
  EXPECT_TRUE(dests[0].holds(a[0]));
  EXPECT_EQ(held(*tier, a), 1);
  EXPECT_EQ(held(*tier, b), 0);
  EXPECT_EQ(held(*tier, c), 1);
}

TEST_F(DiskTierTest, CapacityIsKept) {
  auto tier = make(5);
  std::vector<std::vector<TestBlock>> chains;
  for (int i = 0; i < 10; ++i) {
    chains.push_back(make_chain(small_layout(), 2, 300 + i));
    ASSERT_EQ(put(*tier, chains.back()).num_ok, 2);
    EXPECT_LE(tier->stats().used_blocks, 5);
  }
  EXPECT_EQ(tier->stats().used_blocks, 5);
  EXPECT_EQ(held(*tier, chains[9]), 2);
  EXPECT_EQ(held(*tier, chains[8]), 2);
  EXPECT_EQ(held(*tier, chains[0]), 0);
  EXPECT_EQ(tier->stats().evictions, 15);
}

TEST_F(DiskTierTest, CorruptRecordIsDroppedCountedAndNeverCopied) {
  const KvLayout l = small_layout();
  auto tier = make(4);
  const auto chain = make_chain(l, 3, 9);
  ASSERT_EQ(put(*tier, chain).num_ok, 3);
  flip_byte(1 * slot_bytes_of(l) + record_header_bytes(l.block_size) + 5);  // block 1's payload
  std::vector<Dest> dests = dests_for(l, 3);
  const TierCompletion g = get(*tier, chain, dests);
  EXPECT_EQ(g.num_ok, 1);
  EXPECT_NE(g.status.message().find("checksum"), std::string::npos) << g.status.message();
  EXPECT_TRUE(dests[0].holds(chain[0]));
  EXPECT_TRUE(dests[1].untouched()) << "no byte of a corrupt record reaches the pool";
  EXPECT_EQ(tier->stats().corrupt_records, 1);
  EXPECT_EQ(log_.count("dropped the record in slot 1"), 1);
  EXPECT_EQ(held(*tier, chain), 1);
  io_->complete_all();  // the zero page over its header
  std::vector<TierCompletion> out;
  tier->poll(out);
  EXPECT_EQ(magic_on_disk(1), 0u);
  EXPECT_EQ(tier->stats().used_blocks, 2);
}

TEST_F(DiskTierTest, FullDiskTurnsTheTierOffOnce) {
  auto tier = make(4);
  const auto a = make_chain(small_layout(), 1, 1), b = make_chain(small_layout(), 2, 2);
  ASSERT_EQ(put(*tier, a).num_ok, 1);
  io_->inject({IoOpcode::kWrite, -ENOSPC});
  const TierCompletion p = put(*tier, b);
  EXPECT_EQ(p.num_ok, 0);
  EXPECT_NE(p.status.message().find("disk is full"), std::string::npos) << p.status.message();
  EXPECT_FALSE(tier->enabled());
  EXPECT_NE(tier->disabled_reason().find("disk is full"), std::string::npos);
  EXPECT_EQ(tier->stats().faults, 1);
  EXPECT_EQ(log_.count("disk tier off"), 1);
  // From now on every op answers at once, as a miss, without touching the disk.
  const size_t requests = io_->log.size();
  std::vector<TierCompletion> out;
  const std::vector<BlockHash> hashes = hashes_of(a);
  const TierOpId l = tier->lookup(hashes);
  const std::vector<TierPut> puts = puts_of(a);
  const TierOpId pu = tier->put(puts);
  std::vector<Dest> dests = dests_for(small_layout(), 1);
  const std::vector<TierGet> gets = gets_of(a, dests);
  const TierOpId g = tier->get(gets);
  tier->poll(out);
  ASSERT_EQ(out.size(), 3u);
  for (const TierCompletion& c : out) {
    EXPECT_TRUE(c.op == l || c.op == pu || c.op == g);
    EXPECT_EQ(c.num_ok, 0);
    EXPECT_EQ(c.status.code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(io_->log.size(), requests);
  EXPECT_TRUE(dests[0].untouched());
  EXPECT_EQ(log_.count("disk tier off"), 1);
}

TEST_F(DiskTierTest, ReadErrorTurnsTheTierOff) {
  auto tier = make(4);
  const auto a = make_chain(small_layout(), 2, 1);
  ASSERT_EQ(put(*tier, a).num_ok, 2);
  io_->inject({IoOpcode::kRead, -EIO});
  std::vector<Dest> dests = dests_for(small_layout(), 2);
  const TierCompletion g = get(*tier, a, dests);
  EXPECT_EQ(g.num_ok, 0);
  EXPECT_TRUE(dests[0].untouched());
  EXPECT_FALSE(tier->enabled());
  EXPECT_NE(tier->disabled_reason().find(std::strerror(EIO)), std::string::npos) << tier->disabled_reason();
  EXPECT_EQ(tier->stats().faults, 1);
}

TEST_F(DiskTierTest, ShortTransfersAreFinished) {
  auto tier = make(8);
  const auto a = make_chain(small_layout(), 4, 1);
  io_->inject({IoOpcode::kWrite, kIoAlign});  // the body write moves one page
  ASSERT_EQ(put(*tier, a).num_ok, 4);
  io_->inject({IoOpcode::kRead, 2 * kIoAlign});
  std::vector<Dest> dests = dests_for(small_layout(), 4);
  ASSERT_EQ(get(*tier, a, dests).num_ok, 4);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(dests[i].holds(a[i]));
  EXPECT_EQ(tier->io_stats().short_transfers, 2);
  EXPECT_TRUE(tier->enabled());
}

TEST_F(DiskTierTest, TransferThatMovesNothingTurnsTheTierOff) {
  auto tier = make(8);
  const auto a = make_chain(small_layout(), 1, 1);
  ASSERT_EQ(put(*tier, a).num_ok, 1);
  io_->inject({IoOpcode::kRead, 0});
  std::vector<Dest> dests = dests_for(small_layout(), 1);
  EXPECT_EQ(get(*tier, a, dests).num_ok, 0);
  EXPECT_FALSE(tier->enabled());
  EXPECT_NE(tier->disabled_reason().find("short read"), std::string::npos) << tier->disabled_reason();
}

TEST_F(DiskTierTest, FaultFailsWhatIsInFlightAndQueuedAndFreesEverything) {
  auto tier = make(8, small_layout(), [](DiskTierOptions& o) { o.queue_depth = 2; });
  const auto a = make_chain(small_layout(), 2, 1), b = make_chain(small_layout(), 2, 2), c = make_chain(small_layout(), 1, 3);
  ASSERT_EQ(put(*tier, a).num_ok, 2);
  std::vector<Dest> dests = dests_for(small_layout(), 2);
  const std::vector<TierGet> gets = gets_of(a, dests);
  const TierOpId g = tier->get(gets);
  const std::vector<TierPut> pb = puts_of(b), pc = puts_of(c);
  const TierOpId wb = tier->put(pb);
  const TierOpId wc = tier->put(pc);  // queued: two requests are in flight already
  ASSERT_EQ(io_->num_pending(), 2);
  io_->inject({IoOpcode::kWrite, -EIO});
  io_->complete_at(pending_index(IoOpcode::kWrite));
  std::vector<TierCompletion> out;
  tier->poll(out);
  tier->check_integrity();
  EXPECT_FALSE(tier->enabled());
  io_->complete_all();  // the read finishes after the fault: it fails, its buffers come back
  tier->poll(out);
  tier->check_integrity();
  ASSERT_EQ(out.size(), 3u);
  for (const TierCompletion& done : out) {
    EXPECT_TRUE(done.op == g || done.op == wb || done.op == wc);
    EXPECT_EQ(done.num_ok, 0) << "op " << done.op;
  }
  EXPECT_TRUE(dests[0].untouched());
  EXPECT_EQ(tier->stats().faults, 1);
}

TEST_F(DiskTierTest, EraseDropsNowAndOnDisk) {
  auto tier = make(8);
  const auto a = make_chain(small_layout(), 1, 1), b = make_chain(small_layout(), 1, 2), c = make_chain(small_layout(), 1, 3);
  ASSERT_EQ(put(*tier, a).num_ok, 1);  // slot 0
  ASSERT_EQ(put(*tier, b).num_ok, 1);  // slot 1
  const std::vector<BlockHash> ha = hashes_of(a), hb = hashes_of(b), hc = hashes_of(c);
  tier->erase(ha);
  EXPECT_EQ(held(*tier, a), 0);
  io_->complete_all();
  std::vector<TierCompletion> out;
  tier->poll(out);
  EXPECT_EQ(magic_on_disk(0), 0u);
  // Erased while being read: the read still delivers (it verified), the slot goes after it.
  std::vector<Dest> dests = dests_for(small_layout(), 1);
  const std::vector<TierGet> gets = gets_of(b, dests);
  const TierOpId g = tier->get(gets);
  tier->erase(hb);
  EXPECT_EQ(finish(*tier, g, io_).num_ok, 1);
  EXPECT_TRUE(dests[0].holds(b[0]));
  io_->complete_all();
  tier->poll(out);
  EXPECT_EQ(magic_on_disk(1), 0u);
  // Erased while being written: never visible.
  const std::vector<TierPut> pc = puts_of(c);
  const TierOpId p = tier->put(pc);
  tier->erase(hc);
  EXPECT_EQ(finish(*tier, p, io_).num_ok, 1);
  EXPECT_EQ(held(*tier, c), 0);
  io_->complete_all();
  tier->poll(out);
  tier->check_integrity();
  EXPECT_EQ(tier->stats().used_blocks, 0);
}

TEST_F(DiskTierTest, WriteBuffersBoundWhatIsInFlight) {
  auto tier = make(8, small_layout(), [](DiskTierOptions& o) { o.write_buffer_bytes = 2 * slot_bytes_of(small_layout()); });
  const auto chain = make_chain(small_layout(), 4, 1);
  const TierCompletion p = put(*tier, chain);
  EXPECT_EQ(p.num_ok, 2);
  EXPECT_EQ(p.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(held(*tier, chain), 2);
  EXPECT_EQ(tier->stats().put_failures, 2);
}

TEST_F(DiskTierTest, GetStopsAtTheFirstMiss) {
  auto tier = make(8);
  const auto chain = make_chain(small_layout(), 3, 1);
  ASSERT_EQ(put(*tier, {chain[0]}).num_ok, 1);
  ASSERT_EQ(put(*tier, {chain[2]}).num_ok, 1);
  io_->log.clear();
  std::vector<Dest> dests = dests_for(small_layout(), 3);
  const TierCompletion g = get(*tier, chain, dests);
  EXPECT_EQ(g.num_ok, 1);
  EXPECT_TRUE(g.status.is_ok()) << "a miss is not an error";
  EXPECT_EQ(io_->count(IoOpcode::kRead), 1);
  EXPECT_TRUE(dests[2].untouched());
}

TEST_F(DiskTierTest, PutOfAHeldOrInFlightBlockWritesNothing) {
  auto tier = make(8);
  const auto chain = make_chain(small_layout(), 2, 1);
  const std::vector<TierPut> puts = puts_of(chain);
  const TierOpId first = tier->put(puts);
  const TierOpId second = tier->put(puts);  // in flight: nothing new to write
  EXPECT_EQ(io_->num_pending(), 1);
  std::vector<TierCompletion> others;
  EXPECT_EQ(finish(*tier, first, io_, &others).num_ok, 2);
  ASSERT_EQ(others.size(), 1u);
  EXPECT_EQ(others[0].op, second);
  EXPECT_EQ(others[0].num_ok, 2);
  io_->log.clear();
  EXPECT_EQ(put(*tier, chain).num_ok, 2);  // held: only refreshed
  EXPECT_TRUE(io_->log.empty());
}

TEST_F(DiskTierTest, RejectsBlocksOfAnotherModelOrShape) {
  auto tier = make(8);
  const auto other_model = make_chain(small_layout(), 1, 1, KvNamespace{999, kNs.kv_format, 0});
  EXPECT_EQ(put(*tier, other_model).status.code(), StatusCode::kInvalidArgument);
  const auto other_shape = make_chain(small_layout(kernels::KvDType::kF16), 1, 1);
  EXPECT_EQ(put(*tier, other_shape).num_ok, 0);
  EXPECT_TRUE(io_->log.empty());
  EXPECT_TRUE(tier->enabled());
}

// Random puts, gets, erases and completion order, with and without an eviction callback:
// every invariant holds after every step and every delivered block is the one asked for.
TEST_F(DiskTierTest, RandomOpsKeepEveryInvariant) {
  const KvLayout l = small_layout();
  auto tier = make(12, l, [](DiskTierOptions& o) {
    o.queue_depth = 4;
    o.write_buffer_bytes = 6 * slot_bytes_of(small_layout());
    o.read_buffer_bytes = 5 * slot_bytes_of(small_layout());
  });
  std::vector<std::vector<TestBlock>> chains;
  std::map<BlockHash, const TestBlock*> by_hash;
  for (int i = 0; i < 10; ++i) chains.push_back(make_chain(l, 1 + i % 4, 1000 + i));
  for (const auto& c : chains) {
    for (const TestBlock& b : c) by_hash[b.meta.block_hash] = &b;
  }
  int64_t demoted = 0;
  tier->set_eviction_callback([&](const BlockRecordView& r, int32_t) {
    const TestBlock* b = by_hash.at(r.meta.block_hash);
    EXPECT_TRUE(std::equal(r.payload.begin(), r.payload.end(), b->payload.begin()));
    ++demoted;
  });
  struct PendingGet {
    size_t chain;
    std::vector<Dest> dests;
    std::vector<TierGet> gets;
  };
  std::map<TierOpId, std::unique_ptr<PendingGet>> gets;
  Rng rng(42);
  std::vector<TierCompletion> out;
  int64_t delivered = 0;
  for (int step = 0; step < 3000; ++step) {
    const size_t c = rng.next_u64() % chains.size();
    switch (rng.next_u64() % 6) {
      case 0:
      case 1: {
        const std::vector<TierPut> puts = puts_of(chains[c], static_cast<int32_t>(rng.next_u64() % 3));
        tier->put(puts);
        break;
      }
      case 2: {
        auto g = std::make_unique<PendingGet>();
        g->chain = c;
        g->dests = dests_for(l, chains[c].size());
        g->gets = gets_of(chains[c], g->dests);
        const TierOpId id = tier->get(g->gets);
        gets[id] = std::move(g);
        break;
      }
      case 3:
        if (rng.next_u64() % 4 == 0) {
          const std::vector<BlockHash> h = hashes_of(chains[c]);
          tier->erase(std::span<const BlockHash>(h).subspan(rng.next_u64() % h.size()));
        }
        break;
      default:
        for (int k = 0; k < 3 && io_->num_pending() > 0; ++k) {
          io_->complete_at(static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(io_->num_pending())));
        }
    }
    if (step == 1500) tier->set_eviction_callback(nullptr);
    out.clear();
    tier->poll(out);
    tier->check_integrity();
    for (const TierCompletion& done : out) {
      auto it = gets.find(done.op);
      if (it == gets.end()) continue;
      for (int64_t i = 0; i < done.num_ok; ++i) {
        EXPECT_TRUE(it->second->dests[i].holds(chains[it->second->chain][i])) << "step " << step;
      }
      delivered += done.num_ok;
      gets.erase(it);
    }
  }
  io_->complete_all();
  for (int round = 0; round < 8 && (io_->num_pending() > 0 || !gets.empty()); ++round) {
    out.clear();
    tier->poll(out);
    for (const TierCompletion& done : out) gets.erase(done.op);
    io_->complete_all();
  }
  tier->check_integrity();
  EXPECT_GT(delivered, 100);
  EXPECT_GT(demoted, 10);
  EXPECT_GT(tier->stats().evictions, demoted);
  EXPECT_EQ(tier->stats().corrupt_records, 0);
  EXPECT_TRUE(tier->enabled());
}

}  // namespace
}  // namespace pagoda::kvcache
