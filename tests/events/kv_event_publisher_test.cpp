// The publisher on loopback with real ZeroMQ sockets: three frames in vLLM's format to a SUB,
// the replay ROUTER, the snapshot barrier, and visible loss when the queue overflows.
#include "events/kv_event_publisher.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <condition_variable>
#include <mutex>

#include "zmq_test_util.h"

namespace pagoda::events {
namespace {

using testing::Message;

KvEventsConfig loopback_config() {
  KvEventsConfig c;
  c.enable_kv_cache_events = true;
  c.publisher = "zmq";
  c.endpoint = "tcp://127.0.0.1:*";
  c.replay_endpoint = "tcp://127.0.0.1:*";
  c.topic = "kv@w1@stories";
  return c;
}

// Blocks of `block_size` tokens chained from the root; block i holds tokens base+i*bs...
struct Chain {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<kvcache::BlockInfo> blocks;
  Chain(uint64_t first_hash, int n, int block_size, uint64_t salt = 0, kvcache::BlockHash parent = kvcache::kRootBlockHash) {
    tokens.resize(n);
    for (int i = 0; i < n; ++i) {
      for (int t = 0; t < block_size; ++t) tokens[i].push_back(static_cast<int32_t>(first_hash * 100 + i * block_size + t));
      kvcache::BlockInfo b;
      b.block = i;
      b.hash = first_hash + static_cast<uint64_t>(i);
      b.parent_hash = i == 0 ? parent : first_hash + static_cast<uint64_t>(i) - 1;
      b.tokens = tokens[i];
      b.ns.cache_salt = salt;
      blocks.push_back(b);
    }
  }
};

class PublisherTest : public ::testing::Test {
 protected:
  void start(KvEventsConfig config, std::function<double()> clock = [] { return 1234.5; }) {
    auto p = KvEventPublisher::create(config, std::move(clock), logger_);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    publisher_ = std::move(p).value();
  }
  // A SUB socket whose subscription has reached the publisher: probe blocks are stored until one
  // arrives (ZeroMQ drops what a PUB sends before the subscription is in), then the rest of the
  // probes are drained up to a snapshot barrier. Returns the last seq received.
  int64_t subscribe(ZmqSocket& sub, uint64_t probe_hash = 1u << 20) {
    EXPECT_TRUE(sub.set_bytes(ZMQ_SUBSCRIBE, publisher_->config().topic).is_ok());
    EXPECT_TRUE(sub.connect(publisher_->endpoint()).is_ok());
    Message m;
    bool got = false;
    for (int i = 0; i < 400 && !got; ++i) {
      Chain probe(probe_hash + i, 1, 2);
      publisher_->on_blocks_stored(probe.blocks);
      got = testing::next_message(sub, m, 25);
    }
    if (!got) {
      ADD_FAILURE() << "the subscription never reached the publisher";
      return -1;
    }
    auto barrier = publisher_->snapshot();
    EXPECT_TRUE(barrier.is_ok());
    while (m.seq < barrier->seq) {
      if (!testing::next_message(sub, m, 5000)) {
        ADD_FAILURE() << "a probe batch went missing";
        return -1;
      }
    }
    return m.seq;
  }

  Logger logger_{LogLevel::kWarn, stderr};
  ZmqContext ctx_;
  std::unique_ptr<KvEventPublisher> publisher_;
};

TEST_F(PublisherTest, ThreeFramesInVllmsFormatToARealSubscriber) {
  start(loopback_config());
  ZmqSocket sub(ctx_, ZMQ_SUB);
  const int64_t last_probe = subscribe(sub);
  ASSERT_GE(last_probe, 0);

  Chain chain(1000, 3, 4, /*salt=*/0x5a17);
  publisher_->on_blocks_stored(chain.blocks);
  kvcache::BlockInfo evicted;
  for (uint64_t h : {1001u, 1002u}) {
    evicted.hash = h;
    publisher_->on_block_evicted(evicted);
  }
  std::vector<KvEvent> events;
  int64_t expected_seq = last_probe + 1;
  std::vector<uint64_t> removed;
  while (removed.size() < 2) {
    Message m;
    ASSERT_TRUE(testing::next_message(sub, m, 5000)) << "missing batch " << expected_seq;
    EXPECT_EQ(m.topic, "kv@w1@stories");
    EXPECT_EQ(m.seq, expected_seq++);  // consecutive, one per batch
    auto batch = decode_batch(m.payload);
    ASSERT_TRUE(batch.is_ok()) << batch.status().message();
    EXPECT_EQ(batch->ts, 1234.5);
    EXPECT_EQ(batch->data_parallel_rank, 0);
    for (KvEvent& e : batch->events) {
      if (e.type == KvEventType::kBlockRemoved) removed.insert(removed.end(), e.block_hashes.begin(), e.block_hashes.end());
      events.push_back(std::move(e));
    }
  }
  ASSERT_GE(events.size(), 2u);
  const KvEvent& s = events[0];
  EXPECT_EQ(s.type, KvEventType::kBlockStored);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{1000, 1001, 1002}));
  EXPECT_FALSE(s.parent_block_hash.has_value());  // the root
  std::vector<int32_t> tokens;
  for (const auto& t : chain.tokens) tokens.insert(tokens.end(), t.begin(), t.end());
  EXPECT_EQ(s.token_ids, tokens);
  EXPECT_EQ(s.block_size, 4);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_EQ(s.extra_keys, (std::vector<uint64_t>{0x5a17, 0x5a17, 0x5a17}));
  EXPECT_EQ(s.group_idx, 0);
  EXPECT_EQ(removed, (std::vector<uint64_t>{1001, 1002}));
  EXPECT_EQ(events.back().medium, "GPU");

  // Tier media, and a chain that continues a cached parent.
  Chain lower(2000, 2, 4, 0, /*parent=*/1000);
  publisher_->on_tier_stored("CPU", lower.blocks);
  const std::vector<kvcache::BlockHash> gone = {2001};
  publisher_->on_tier_removed("DISK", gone);
  std::vector<KvEvent> tier;
  while (tier.size() < 2) {
    Message m;
    ASSERT_TRUE(testing::next_message(sub, m, 5000));
    EXPECT_EQ(m.seq, expected_seq++);
    auto batch = decode_batch(m.payload);
    ASSERT_TRUE(batch.is_ok());
    for (KvEvent& e : batch->events) tier.push_back(std::move(e));
  }
  EXPECT_EQ(tier[0].medium, "CPU");
  EXPECT_EQ(tier[0].parent_block_hash, 1000u);
  EXPECT_EQ(tier[1].type, KvEventType::kBlockRemoved);
  EXPECT_EQ(tier[1].medium, "DISK");

  // The snapshot is the mirror of all that, as of the last batch sent.
  auto snap = publisher_->snapshot();
  ASSERT_TRUE(snap.is_ok()) << snap.status().message();
  EXPECT_EQ(snap->seq, expected_seq - 1);
  BlockIndex index;
  index.reset(*snap);
  EXPECT_TRUE(index.contains("GPU", 1000));
  EXPECT_FALSE(index.contains("GPU", 1001));
  EXPECT_TRUE(index.contains("CPU", 2001));
  EXPECT_EQ(publisher_->stats().last_seq, expected_seq - 1);
}

TEST_F(PublisherTest, ReplayAnswersFromASequenceNumberWithTheEndMarker) {
  KvEventsConfig config = loopback_config();
  config.buffer_steps = 3;
  start(config);
  // One batch per store: the snapshot barrier closes a batch and waits until it is sent.
  ASSERT_EQ(publisher_->snapshot()->seq, 0);  // AllBlocksCleared
  for (uint64_t h = 1; h <= 5; ++h) {
    Chain c(h * 10, 1, 2);
    publisher_->on_blocks_stored(c.blocks);
    ASSERT_TRUE(publisher_->snapshot().is_ok());
  }
  ASSERT_EQ(publisher_->stats().last_seq, 5);  // 0: AllBlocksCleared, 1..5: the stores
  ZmqSocket dealer(ctx_, ZMQ_DEALER);
  ASSERT_TRUE(dealer.connect(publisher_->replay_endpoint()).is_ok());
  std::vector<Message> got;
  ASSERT_TRUE(testing::replay_from(dealer, 4, got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].seq, 4);
  EXPECT_EQ(got[1].seq, 5);
  EXPECT_EQ(decode_batch(got[1].payload)->events[0].block_hashes, std::vector<uint64_t>{50});
  // Only buffer_steps batches are kept: asked from 0, the reply starts at 3 (a gap to resync).
  ASSERT_TRUE(testing::replay_from(dealer, 0, got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].seq, 3);
  ASSERT_TRUE(testing::replay_from(dealer, 6, got));  // nothing newer: just the end marker
  EXPECT_TRUE(got.empty());
  // A malformed request is refused, and the socket keeps serving.
  ASSERT_TRUE(dealer.send({"", "short"}));
  ASSERT_TRUE(testing::replay_from(dealer, 5, got));
  EXPECT_EQ(got.size(), 1u);
  EXPECT_TRUE(testing::eventually([&] { return publisher_->stats().replay_rejected == 1; }));
}

// The publisher thread is held inside its first send (the batch clock blocks) while the step
// thread overflows the queue: the overflow is dropped, counted, and a sequence number skipped.
TEST_F(PublisherTest, AFullQueueDropsVisiblyAsASequenceGap) {
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, open = false;
  KvEventsConfig config = loopback_config();
  config.max_queue_size = 2;
  start(config, [&] {
    std::unique_lock lock(m);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    return 1.0;
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });  // sending seq 0 (AllBlocksCleared)
  }
  for (uint64_t h = 1; h <= 5; ++h) {
    Chain c(h * 10, 1, 2);
    publisher_->on_blocks_stored(c.blocks);
  }
  EXPECT_EQ(publisher_->stats().events_dropped, 3);
  {
    std::lock_guard lock(m);
    open = true;
  }
  cv.notify_all();
  auto first = publisher_->snapshot();
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->seq, 2);  // 0, 1 (the two kept), 2 skipped where the others were dropped
  Chain after(99, 1, 2);
  publisher_->on_blocks_stored(after.blocks);
  auto snap = publisher_->snapshot();
  ASSERT_TRUE(snap.is_ok());
  EXPECT_EQ(snap->seq, 3);
  BlockIndex index;
  index.reset(*snap);
  EXPECT_EQ(index.num_blocks("GPU"), 6);  // the mirror has the dropped ones too
  ZmqSocket dealer(ctx_, ZMQ_DEALER);
  ASSERT_TRUE(dealer.connect(publisher_->replay_endpoint()).is_ok());
  std::vector<Message> got;
  ASSERT_TRUE(testing::replay_from(dealer, 0, got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].seq, 0);
  EXPECT_EQ(got[1].seq, 1);
  EXPECT_EQ(got[2].seq, 3);
  EXPECT_EQ(decode_batch(got[0].payload)->events[0].type, KvEventType::kAllBlocksCleared);
  EXPECT_EQ(decode_batch(got[1].payload)->events.size(), 2u);
}

TEST_F(PublisherTest, BindErrorsAreValues) {
  start(loopback_config());
  const std::string bound = publisher_->endpoint();  // tcp://127.0.0.1:PORT
  KvEventsConfig taken = loopback_config();
  taken.endpoint = "tcp://*:" + bound.substr(bound.rfind(':') + 1);  // the same port, all interfaces
  auto second = KvEventPublisher::create(taken, [] { return 0.0; }, logger_);
  EXPECT_FALSE(second.is_ok());
  taken.endpoint = "tcp://*:port";
  auto third = KvEventPublisher::create(taken, [] { return 0.0; }, logger_);
  ASSERT_FALSE(third.is_ok());
  EXPECT_NE(third.status().message().find("tcp://*:port"), std::string::npos) << third.status().message();
  publisher_->stop();
  EXPECT_FALSE(publisher_->snapshot().is_ok());  // stopped: no answer, no hang
}

}  // namespace
}  // namespace pagoda::events
