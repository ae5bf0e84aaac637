// KV events of the tiers end to end: a TierStack over a real host tier, with the publisher as
// its TierEventListener (as `pagoda serve --kv-events-config` wires it), announces the blocks
// the pool evicted into the host tier as BlockStored with medium "CPU", and their eviction from
// it as BlockRemoved; the publisher's snapshot (its exact mirror) shows them there. A disk
// tier's records found at start-up are published with medium "DISK" when the publisher is set.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <thread>

#include "events/kv_event_publisher.h"
#include "kvcache/block_manager.h"
#include "kvcache/disk_tier.h"
#include "kvcache/host_tier.h"
#include "kvcache/tier_stack.h"

namespace pagoda::events {
namespace {

// One layer, one KV head of width 2, blocks of 4 tokens.
kvcache::KvLayout tiny_layout() {
  kvcache::KvLayout layout;
  layout.n_layer = 1;
  layout.n_kv_head = 1;
  layout.head_dim = 2;
  layout.block_size = 4;
  return layout;
}

// A ZeroMQ publisher on a free loopback port, topic "kv".
KvEventsConfig loopback_events() {
  KvEventsConfig c;
  c.enable_kv_cache_events = true;
  c.publisher = "zmq";
  c.endpoint = "tcp://127.0.0.1:*";
  c.topic = "kv";
  return c;
}

TEST(TierEventsPublish, HostTierBlocksArePublishedWithMediumCpu) {
  const kvcache::KvLayout layout = tiny_layout();
  const kvcache::KvNamespace ns{1, 2, 0};
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  auto publisher = KvEventPublisher::create(loopback_events(), [] { return 1.0; }, logger);
  ASSERT_TRUE(publisher.is_ok()) << publisher.status().message();
  {
    kvcache::BlockPool pool = kvcache::BlockPool::create(layout, 4).value();
    kvcache::BlockManager bm(pool);
    kvcache::TierStack stack(pool, kvcache::OffloadMode::kWriteBack, clock, logger);
    kvcache::HostTierOptions o;
    o.layout = layout;
    o.capacity_bytes = 2 * ((kvcache::record_bytes(kvcache::record_meta_for(layout)) + 63) / 64 * 64);
    stack.add_tier(kvcache::HostTier::create(o, clock).value());
    stack.set_event_listener(publisher->get());
    bm.add_listener(publisher->get());
    bm.add_listener(&stack);
    auto compute = [&](int32_t base) {
      std::vector<int32_t> t;
      for (int i = 0; i < 8; ++i) t.push_back(base + i);
      const kvcache::SeqId s = bm.add_sequence(8, {ns, 0});
      std::vector<int64_t> slots(8);
      std::vector<kvcache::BlockCopy> copies;
      EXPECT_TRUE(bm.append(s, t, slots, copies));
      bm.commit(s);
      bm.free_sequence(s);
      std::vector<kvcache::BlockHash> h;
      kvcache::chain_hashes(&kvcache::hash_block, kvcache::kRootBlockHash, t, 4, ns.key(), h);
      return h;
    };
    const std::vector<kvcache::BlockHash> a = compute(100);
    bm.evict_all_cached();
    stack.poll();
    auto snap = (*publisher)->snapshot();
    ASSERT_TRUE(snap.is_ok()) << snap.status().message();
    BlockIndex index;
    index.reset(*snap);
    for (kvcache::BlockHash h : a) {
      EXPECT_TRUE(index.contains("CPU", h));
      EXPECT_FALSE(index.contains("GPU", h)) << "evicted from the pool";
    }
    const std::vector<kvcache::BlockHash> b = compute(500);
    bm.evict_all_cached();  // b's two blocks take the host tier's two slots: a's are removed
    stack.poll();
    snap = (*publisher)->snapshot();
    ASSERT_TRUE(snap.is_ok());
    index.reset(*snap);
    for (kvcache::BlockHash h : a) EXPECT_FALSE(index.contains("CPU", h));
    for (kvcache::BlockHash h : b) EXPECT_TRUE(index.contains("CPU", h));
    EXPECT_EQ(index.num_blocks("CPU"), 2);
    bm.remove_listener(&stack);
    bm.remove_listener(publisher->get());
  }
  (*publisher)->stop();
}

TEST(TierEventsPublish, DiskRecordsFoundAtStartUpArePublishedWithMediumDisk) {
  const kvcache::KvLayout layout = tiny_layout();
  const kvcache::KvNamespace ns{1, 2, 0};
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  std::string dir = ::testing::TempDir() + "pagoda-found-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  kvcache::DiskTierOptions o;
  o.dir = dir;
  o.layout = layout;
  o.capacity_bytes = 8 * 4096;
  o.model_fingerprint = ns.model_fingerprint;
  o.kv_format = ns.kv_format;
  o.write_buffer_bytes = o.read_buffer_bytes = 8 * 4096;
  std::vector<kvcache::BlockHash> chain;
  {  // a first run: the pool's blocks written through to the disk tier
    kvcache::BlockPool pool = kvcache::BlockPool::create(layout, 4).value();
    kvcache::BlockManager bm(pool);
    kvcache::TierStack stack(pool, kvcache::OffloadMode::kWriteBack, clock, logger);
    stack.add_tier(kvcache::DiskTier::create(o, clock, logger).value(), /*write_through=*/true);
    bm.add_listener(&stack);
    std::vector<int32_t> t{7, 8, 9, 10, 11, 12, 13, 14};
    const kvcache::SeqId s = bm.add_sequence(8, {ns, 0});
    std::vector<int64_t> slots(8);
    std::vector<kvcache::BlockCopy> copies;
    ASSERT_TRUE(bm.append(s, t, slots, copies));
    bm.commit(s);
    bm.free_sequence(s);
    kvcache::chain_hashes(&kvcache::hash_block, kvcache::kRootBlockHash, t, 4, ns.key(), chain);
    for (int i = 0; i < 10000000 && stack.has_pending_work(); ++i) {  // until the writes complete
      stack.poll();
      std::this_thread::yield();
    }
    ASSERT_FALSE(stack.has_pending_work());
    bm.remove_listener(&stack);
  }
  auto publisher = KvEventPublisher::create(loopback_events(), [] { return 1.0; }, logger);
  ASSERT_TRUE(publisher.is_ok()) << publisher.status().message();
  {  // the restart: found on disk, told to the publisher as it is set (as cmd_serve does)
    kvcache::BlockPool pool = kvcache::BlockPool::create(layout, 4).value();
    kvcache::TierStack stack(pool, kvcache::OffloadMode::kWriteBack, clock, logger);
    stack.add_tier(kvcache::DiskTier::create(o, clock, logger).value(), /*write_through=*/true);
    stack.set_event_listener(publisher->get());
    auto snap = (*publisher)->snapshot();
    ASSERT_TRUE(snap.is_ok()) << snap.status().message();
    BlockIndex index;
    index.reset(*snap);
    for (kvcache::BlockHash h : chain) EXPECT_TRUE(index.contains("DISK", h));
    EXPECT_EQ(index.num_blocks("DISK"), 2);
    stack.set_event_listener(nullptr);
  }
  (*publisher)->stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::events
