// No committed block is lost silently (kvcache/tier_stack.h, "No block is lost silently"): a
// real disk tier over ManualIo whose writes complete slowly (one request per poll), with room to
// stage only two records, under write-through. Every committed block reaches the disk or is
// counted in TierCounters::dropped_writes, whatever the order of completions and evictions.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "disk_test_util.h"
#include "kvcache/block_manager.h"
#include "kvcache/tier_stack.h"

namespace pagoda::kvcache {
namespace {

using namespace disk_test;

class TierStackWritesTest : public ::testing::Test {
 protected:
  void build(int64_t pool_blocks, int64_t write_units) {
    const KvLayout l = small_layout();
    pool_.emplace(BlockPool::create(l, pool_blocks).value());
    bm_.emplace(*pool_);
    stack_.emplace(*pool_, OffloadMode::kWriteThrough, clock_, log_.logger);
    DiskTierOptions o = options_for(dir_.path, l, 256);
    o.write_buffer_bytes = write_units * slot_bytes_of(l);
    auto io = std::make_unique<ManualIo>(o.queue_depth);
    io_ = io.get();
    auto disk = open_tier(o, clock_, log_.logger, std::move(io));
    disk_ = disk.get();
    stack_->add_tier(std::move(disk), /*write_through=*/true);
    bm_->add_listener(&*stack_);
  }
  void TearDown() override {
    if (bm_) bm_->remove_listener(&*stack_);
    stack_.reset();
    bm_.reset();
  }
  // Prefills `tokens` (their KV: bytes derived from the token), commits and frees: the blocks
  // are cached in the pool and write-through puts them into the disk tier.
  void compute(const std::vector<int32_t>& tokens) {
    PrefixMatch hit = bm_->match_prefix(tokens, kNs);
    const SeqId s = bm_->add_sequence(static_cast<int64_t>(tokens.size()), {kNs, 0});
    const int64_t cached = hit.num_tokens();
    bm_->adopt(s, std::move(hit));
    const std::vector<int32_t> rest(tokens.begin() + cached, tokens.end());
    std::vector<int64_t> slots(rest.size());
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(bm_->append(s, rest, slots, copies));
    const kernels::KvLayerView v = pool_->layer_view(0);
    for (size_t i = 0; i < rest.size(); ++i) {
      std::memset(static_cast<uint8_t*>(v.k) + slots[i] * 16 * 4, static_cast<int>(rest[i] & 0xFF), 16 * 4);
    }
    bm_->commit(s);
    bm_->free_sequence(s);
    bm_->check_integrity();
  }
  // Polls the stack, completing one I/O request per round (slow completion), until nothing is
  // pending; the stack's and the manager's invariants hold after every round.
  void drain() {
    for (int round = 0; round < 10000 && stack_->has_pending_work(); ++round) {
      stack_->poll();
      stack_->check_integrity();
      bm_->check_integrity();
      if (io_->num_pending() > 0) io_->complete_at(0);
    }
    ASSERT_FALSE(stack_->has_pending_work()) << "tier work never finished";
  }
  static std::vector<BlockHash> chain_of(const std::vector<int32_t>& tokens) {
    std::vector<BlockHash> chain;
    chain_hashes(&hash_block, kRootBlockHash, tokens, small_layout().block_size, kNs.key(), chain);
    return chain;
  }
  int64_t held_on_disk(const std::vector<BlockHash>& chain) {
    int64_t n = 0;
    for (BlockHash h : chain) n += (stack_->holders_now(h) & 1u) != 0;
    return n;
  }
  static std::vector<int32_t> tokens(int n, int32_t base) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(base + i);
    return t;
  }

  TempDir dir_;
  ManualClock clock_;
  LogCapture log_;
  std::optional<BlockPool> pool_;
  std::optional<BlockManager> bm_;
  std::optional<TierStack> stack_;
  ManualIo* io_ = nullptr;
  DiskTier* disk_ = nullptr;
};

// 12 blocks committed at once against 2 staging units: 10 are refused as busy, kept, and put
// again as writes complete, until every one is on disk; nothing dropped.
TEST_F(TierStackWritesTest, SlowCompletionLosesNoCommittedBlock) {
  build(/*pool_blocks=*/64, /*write_units=*/2);
  const std::vector<int32_t> prompt = tokens(48, 1000);
  compute(prompt);
  EXPECT_GT(stack_->num_retries_pending() + stack_->num_puts_in_flight(), 0);
  drain();
  const std::vector<BlockHash> chain = chain_of(prompt);
  ASSERT_EQ(chain.size(), 12u);
  EXPECT_EQ(held_on_disk(chain), 12);
  EXPECT_EQ(stack_->counters(0).dropped_writes, 0);
  EXPECT_GE(stack_->counters(0).retried_writes, 10);
  EXPECT_EQ(log_.count("not stored"), 0) << log_.text();
}

// The pool evicts blocks whose writes were kept to retry (a second prompt needs the room before
// any write completes): each is put at its eviction from its intact bytes. Every committed block
// of both prompts is on disk or counted as dropped, and any drop is logged.
TEST_F(TierStackWritesTest, EvictedBeforeTheRetryIsWrittenOrCounted) {
  build(/*pool_blocks=*/16, /*write_units=*/2);
  const std::vector<int32_t> a = tokens(48, 1000), b = tokens(48, 5000);
  compute(a);
  compute(b);  // evicts most of a's cached blocks while their writes wait
  drain();
  std::vector<BlockHash> all = chain_of(a);
  const std::vector<BlockHash> chain_b = chain_of(b);
  all.insert(all.end(), chain_b.begin(), chain_b.end());
  const int64_t held = held_on_disk(all);
  const int64_t dropped = stack_->counters(0).dropped_writes;
  EXPECT_EQ(held + dropped, 24) << "held " << held << ", dropped " << dropped;
  EXPECT_GT(held, 2);  // more than the first put's two staging units
  if (dropped > 0) {
    EXPECT_GE(log_.count("not stored so far"), 1) << log_.text();
  }
}

// A write that fails with an I/O error (not "busy") is not retried: its block is counted.
TEST_F(TierStackWritesTest, FailedWritesAreCounted) {
  build(/*pool_blocks=*/64, /*write_units=*/16);
  io_->inject(ManualIo::Fault{IoOpcode::kWrite, -EIO, 0});
  const std::vector<int32_t> prompt = tokens(24, 300);
  compute(prompt);
  drain();
  const int64_t held = held_on_disk(chain_of(prompt));
  const int64_t dropped = stack_->counters(0).dropped_writes;
  EXPECT_EQ(held + dropped, 6) << "held " << held << ", dropped " << dropped;
  EXPECT_GE(dropped, 1);
  EXPECT_GE(log_.count("not stored so far"), 1) << log_.text();
}

}  // namespace
}  // namespace pagoda::kvcache
