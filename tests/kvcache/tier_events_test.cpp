// Tier KV events: the TierStack tells its TierEventListener, with each tier's medium, which
// blocks a tier came to hold (a put completed; once per block, not on a refresh) and which it
// dropped (evicted, dropped as corrupt, every announced block when the tier turns disabled), and
// of the disk tier's records found at start-up once the listener is set, so
// the KV event publisher's BlockStored / BlockRemoved follow the tiers as they follow the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "disk_test_util.h"
#include "fake_tier.h"
#include "kvcache/block_manager.h"
#include "kvcache/host_tier.h"
#include "kvcache/tier_stack.h"

namespace pagoda::kvcache {
namespace {

using testing::FakeTier;

KvLayout layout4() {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 1;
  l.head_dim = 2;
  l.block_size = 4;
  return l;
}

constexpr KvNamespace kNs{11, 22, 0};

struct Event {
  bool stored = false;
  std::string medium;
  std::vector<BlockHash> hashes;
  std::vector<BlockHash> parents;       // stored only
  std::vector<std::vector<int32_t>> tokens;
};

class Recorder final : public TierEventListener {
 public:
  void on_tier_stored(std::string_view medium, std::span<const BlockInfo> blocks) override {
    Event e{true, std::string(medium), {}, {}, {}};
    for (const BlockInfo& b : blocks) {
      EXPECT_EQ(b.block, -1);
      e.hashes.push_back(b.hash);
      e.parents.push_back(b.parent_hash);
      e.tokens.emplace_back(b.tokens.begin(), b.tokens.end());
    }
    events.push_back(std::move(e));
  }
  void on_tier_removed(std::string_view medium, std::span<const BlockHash> hashes) override {
    events.push_back(Event{false, std::string(medium), {hashes.begin(), hashes.end()}, {}, {}});
  }
  // Hashes of `medium` stored (or removed) across every event, in order.
  std::vector<BlockHash> all(bool stored, std::string_view medium) const {
    std::vector<BlockHash> out;
    for (const Event& e : events) {
      if (e.stored == stored && e.medium == medium) out.insert(out.end(), e.hashes.begin(), e.hashes.end());
    }
    return out;
  }
  std::vector<Event> events;
};

class TierEventsTest : public ::testing::Test {
 protected:
  void build(int64_t pool_blocks, int64_t host_blocks) {
    pool_.emplace(BlockPool::create(layout4(), pool_blocks).value());
    bm_.emplace(*pool_);
    stack_.emplace(*pool_, OffloadMode::kWriteBack, clock_, logger_);
    HostTierOptions o;
    o.capacity_bytes = host_blocks * ((record_bytes(record_meta_for(layout4())) + 63) / 64 * 64);
    o.layout = layout4();
    auto host = HostTier::create(o, clock_).value();
    host_ = host.get();
    stack_->add_tier(std::move(host));
    auto fake = std::make_unique<FakeTier>("fake", layout4(), 64);
    fake_ = fake.get();
    stack_->add_tier(std::move(fake));
    stack_->set_event_listener(&events_);
    bm_->add_listener(&*stack_);
  }
  void TearDown() override {
    if (bm_) bm_->remove_listener(&*stack_);
    stack_.reset();
    bm_.reset();
  }
  // Prefills and commits `tokens` (its KV: zeros; these tests look at names, not bytes), frees it.
  void compute(const std::vector<int32_t>& tokens) {
    const SeqId s = bm_->add_sequence(static_cast<int64_t>(tokens.size()), {kNs, 0});
    std::vector<int64_t> slots(tokens.size());
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(bm_->append(s, tokens, slots, copies));
    bm_->commit(s);
    bm_->free_sequence(s);
  }
  // Evicts every cached pool block (write-back puts them into the host tier) and completes the puts.
  void evict_all() {
    bm_->evict_all_cached();
    for (int i = 0; i < 4; ++i) {
      fake_->complete_all();
      stack_->poll();
    }
    stack_->check_integrity();
  }
  static std::vector<int32_t> tokens(int n, int32_t base) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(base + i);
    return t;
  }
  static std::vector<BlockHash> hashes(const std::vector<int32_t>& t) {
    std::vector<BlockHash> h;
    chain_hashes(&hash_block, kRootBlockHash, t, 4, kNs.key(), h);
    return h;
  }

  ManualClock clock_;
  Logger logger_{LogLevel::kSilent};
  std::optional<BlockPool> pool_;
  std::optional<BlockManager> bm_;
  std::optional<TierStack> stack_;
  HostTier* host_ = nullptr;
  FakeTier* fake_ = nullptr;
  Recorder events_;
};

TEST_F(TierEventsTest, PutsAreStoredEventsWithTheTiersMediumParentsAndTokens) {
  build(/*pool=*/8, /*host=*/8);
  const std::vector<int32_t> a = tokens(12, 100);
  compute(a);
  EXPECT_TRUE(events_.events.empty()) << "nothing is in a tier before the pool evicts";
  evict_all();
  const std::vector<BlockHash> h = hashes(a);
  std::vector<BlockHash> stored = events_.all(true, "CPU");
  std::sort(stored.begin(), stored.end());
  std::vector<BlockHash> want = h;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(stored, want);
  EXPECT_TRUE(events_.all(false, "CPU").empty());
  for (const Event& e : events_.events) {
    for (size_t i = 0; i < e.hashes.size(); ++i) {
      const size_t k = static_cast<size_t>(std::find(h.begin(), h.end(), e.hashes[i]) - h.begin());
      ASSERT_LT(k, h.size());
      EXPECT_EQ(e.parents[i], k == 0 ? kRootBlockHash : h[k - 1]);
      EXPECT_EQ(e.tokens[i], std::vector<int32_t>(a.begin() + static_cast<std::ptrdiff_t>(4 * k),
                                                  a.begin() + static_cast<std::ptrdiff_t>(4 * k + 4)));
    }
  }
  // Computed and evicted again: the host tier already holds them (a refresh), nothing is told.
  const size_t before = events_.events.size();
  compute(a);
  evict_all();
  EXPECT_EQ(events_.events.size(), before);
}

TEST_F(TierEventsTest, EvictionFromATierIsARemovedEventAndDemotionAStoredOneBelow) {
  build(/*pool=*/8, /*host=*/3);
  const std::vector<int32_t> a = tokens(12, 100), b = tokens(12, 500);
  compute(a);
  evict_all();
  compute(b);
  evict_all();  // b's three blocks push a's out of the host tier, down into the fake tier
  std::vector<BlockHash> removed = events_.all(false, "CPU"), ha = hashes(a);
  std::sort(removed.begin(), removed.end());
  std::sort(ha.begin(), ha.end());
  EXPECT_EQ(removed, ha);
  std::vector<BlockHash> below = events_.all(true, "FAKE");
  std::sort(below.begin(), below.end());
  EXPECT_EQ(below, ha);
  EXPECT_EQ(events_.all(true, "CPU").size(), 6u);
}

TEST_F(TierEventsTest, CorruptRecordDroppedOnReadIsRemoved) {
  build(8, 8);
  const std::vector<int32_t> a = tokens(12, 100);
  compute(a);
  evict_all();
  const std::vector<BlockHash> h = hashes(a);
  std::optional<ByteSpan> bytes = host_->record_bytes_for_test(h[0]);
  ASSERT_TRUE(bytes.has_value());
  (*bytes)[bytes->size() - 20] ^= 0x40;
  const SeqId s = bm_->add_sequence(12, {kNs, 0});
  ASSERT_TRUE(bm_->begin_load(s, std::span<const int32_t>(a).first(8)));
  const std::span<const int32_t> blocks = bm_->loading_blocks(s);
  const std::vector<LoadItem> items = {{blocks[0], h[0], 0}, {blocks[1], h[1], 0}};
  const LoadId load = stack_->load(kNs, items);
  std::optional<LoadResult> r;
  for (int i = 0; i < 4 && !(r = stack_->take_load(load)); ++i) stack_->poll();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->num_ok, 0);
  bm_->finish_load(s, r->num_ok, r->tokens);
  bm_->free_sequence(s);
  EXPECT_EQ(events_.all(false, "CPU"), std::vector<BlockHash>{h[0]});
}

TEST_F(TierEventsTest, ADisabledTierRemovesEverythingItAnnounced) {
  build(8, 2);
  compute(tokens(16, 100));
  evict_all();  // two blocks stay in the host tier, two go down to the fake one
  const std::vector<BlockHash> below = events_.all(true, "FAKE");
  ASSERT_EQ(below.size(), 2u);
  fake_->disable();
  stack_->poll();
  std::vector<BlockHash> removed = events_.all(false, "FAKE");
  std::sort(removed.begin(), removed.end());
  std::vector<BlockHash> want = below;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(removed, want);
  EXPECT_TRUE(events_.all(false, "CPU").empty());
}

TEST_F(TierEventsTest, WithoutAListenerNothingIsRecorded) {
  build(8, 2);
  stack_->set_event_listener(nullptr);
  compute(tokens(16, 100));
  evict_all();
  EXPECT_TRUE(events_.events.empty());
  stack_->check_integrity();
}

TEST(TierEventsFound, DiskRecordsFoundAtStartUpAreAnnouncedOnceParentsFirst) {
  using namespace disk_test;  // NOLINT
  const KvLayout l = small_layout();
  TempDir dir;
  LogCapture log;
  ManualClock clock;
  const std::vector<TestBlock> a = make_chain(l, 3, 1), b = make_chain(l, 2, 2);
  {  // a's blocks written child first, so the slots hold a2 a1 a0 b0 b1
    auto tier = open_tier(options_for(dir.path, l, 16), clock, log.logger);
    const std::vector<TestBlock> a_reversed{a[2], a[1], a[0]};
    ASSERT_EQ(finish(*tier, tier->put(puts_of(a_reversed)), nullptr).num_ok, 3);
    ASSERT_EQ(finish(*tier, tier->put(puts_of(b)), nullptr).num_ok, 2);
  }
  BlockPool pool = BlockPool::create(l, 4).value();
  TierStack stack(pool, OffloadMode::kWriteBack, clock, log.logger);
  auto disk = open_tier(options_for(dir.path, l, 16), clock, log.logger);
  DiskTier& tier = *disk;
  ASSERT_EQ(tier.info().records_found, 5);
  const BlockHash b1 = b[1].meta.block_hash;
  tier.erase(std::span<const BlockHash>(&b1, 1));  // no longer held: not announced
  stack.add_tier(std::move(disk));
  Recorder events;
  stack.set_event_listener(&events);
  ASSERT_EQ(events.events.size(), 1u);
  const Event& e = events.events[0];
  EXPECT_TRUE(e.stored);
  EXPECT_EQ(e.medium, "DISK");
  const std::vector<const TestBlock*> want{&a[0], &a[1], &a[2], &b[0]};
  ASSERT_EQ(e.hashes.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(e.hashes[i], want[i]->meta.block_hash) << i;
    EXPECT_EQ(e.parents[i], want[i]->meta.parent_hash) << i;
    EXPECT_EQ(e.tokens[i], want[i]->tokens) << i;
  }
  // Told once; announced blocks are removed like any other.
  stack.set_event_listener(nullptr);
  stack.set_event_listener(&events);
  EXPECT_EQ(events.events.size(), 1u);
  const BlockHash a1 = a[1].meta.block_hash;
  tier.erase(std::span<const BlockHash>(&a1, 1));
  EXPECT_EQ(events.all(false, "DISK"), std::vector<BlockHash>{a1});
  stack.check_integrity();
}

TEST(TierEventsFound, FoundRecordsNotTakenBeforeTheFirstPollAreForgotten) {
  using namespace disk_test;  // NOLINT
  const KvLayout l = small_layout();
  TempDir dir;
  LogCapture log;
  ManualClock clock;
  const std::vector<TestBlock> a = make_chain(l, 2, 3);
  {
    auto tier = open_tier(options_for(dir.path, l, 8), clock, log.logger);
    ASSERT_EQ(finish(*tier, tier->put(puts_of(a)), nullptr).num_ok, 2);
  }
  auto tier = open_tier(options_for(dir.path, l, 8), clock, log.logger);
  std::vector<TierCompletion> out;
  tier->poll(out);
  EXPECT_TRUE(tier->take_found_blocks().blocks.empty());
  EXPECT_EQ(finish(*tier, tier->lookup(hashes_of(a)), nullptr).num_ok, 2);  // still held, just not told
}

}  // namespace
}  // namespace pagoda::kvcache
