// The subscriber against a publisher the test drives by hand (an XPUB, so the test knows when
// the subscription is in, and a ROUTER answering replays): it syncs from a snapshot, fills a
// gap by replay, resyncs when replay cannot fill it or does not answer, and after a restart;
// and against the real KvEventPublisher end to end.
#include "events/kv_event_subscriber.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <mutex>

#include "events/kv_event_publisher.h"
#include "zmq_test_util.h"

namespace pagoda::events {
namespace {

using testing::batch_storing;

class FakePublisher {
 public:
  FakePublisher() : xpub_(ctx_, ZMQ_XPUB), router_(ctx_, ZMQ_ROUTER) {
    EXPECT_TRUE(xpub_.bind("tcp://127.0.0.1:*").is_ok());
    EXPECT_TRUE(router_.bind("tcp://127.0.0.1:*").is_ok());
  }
  std::string endpoint() const { return xpub_.last_endpoint(); }
  std::string replay_endpoint() const { return router_.last_endpoint(); }
  // The subscription message (0x01 + topic) of a SUB that connected.
  bool await_subscriber() {
    std::vector<std::string> frames;
    return testing::receive_within(xpub_, frames, 10000) && !frames.empty() && frames[0][0] == 1;
  }
  void publish(int64_t seq, uint64_t hash) { ASSERT_TRUE(xpub_.send({"kv", encode_seq(seq), batch_storing(hash)})); }
  // Receives a replay request; returns its start seq (-1: none came) and remembers who asked.
  int64_t await_replay_request() {
    std::vector<std::string> frames;
    if (!testing::receive_within(router_, frames, 10000) || frames.size() != 3) return -1;
    client_ = frames[0];
    int64_t start = -1;
    decode_seq(frames[2], start);
    return start;
  }
  void reply(int64_t seq, uint64_t hash) { ASSERT_TRUE(router_.send({client_, "", encode_seq(seq), batch_storing(hash)})); }
  void reply_end() { ASSERT_TRUE(router_.send({client_, "", encode_seq(-1), ""})); }

 private:
  ZmqContext ctx_;
  ZmqSocket xpub_, router_;
  std::string client_;
};

class SnapshotSourceFake {
 public:
  void set(KvEventsSnapshot s) {
    std::lock_guard lock(mutex_);
    next_ = std::move(s);
  }
  Result<KvEventsSnapshot> operator()() {
    std::lock_guard lock(mutex_);
    ++calls_;
    return next_;
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  KvEventsSnapshot next_;
  int calls_ = 0;
};

SubscriberConfig config_for(const FakePublisher& pub, double replay_timeout_s) {
  SubscriberConfig config;
  config.endpoint = pub.endpoint();
  config.replay_endpoint = pub.replay_endpoint();
  config.topic = "kv";
  config.replay_timeout_s = replay_timeout_s;
  config.resync_interval_s = 0;
  return config;
}

// Replays here are all answered, so the replay timeout is far longer than any answer can take
// on a loaded machine (a short one once made an answered replay count as a timeout in CI).
TEST(KvEventSubscriber, SyncsFillsGapsByReplayAndResyncsWhenItCannot) {
  FakePublisher pub;
  SnapshotSourceFake source;
  source.set(KvEventsSnapshot{1, {{"GPU", {100}}}});
  BlockIndex index;
  SteadyClock clock;
  Logger logger(LogLevel::kWarn, stderr);
  KvEventSubscriber sub(config_for(pub, 60), index, [&] { return source(); }, clock, logger);
  ASSERT_TRUE(sub.start().is_ok());
  ASSERT_TRUE(pub.await_subscriber());
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().synced; }));
  EXPECT_TRUE(index.contains("GPU", 100));

  pub.publish(1, 1);  // covered by the snapshot
  pub.publish(2, 2);
  ASSERT_TRUE(testing::eventually([&] { return index.contains("GPU", 2); }));
  EXPECT_FALSE(index.contains("GPU", 1));

  // 3 is lost on the way: replay fills it, and 4 follows.
  pub.publish(4, 4);
  ASSERT_EQ(pub.await_replay_request(), 3);
  pub.reply(3, 3);
  pub.reply(4, 4);
  pub.reply_end();
  // The replayed batches reach the index as they arrive; the gap counts as filled only after
  // the end of the replay (seen as gaps_filled 0 with 4 already indexed, under load).
  ASSERT_TRUE(testing::eventually([&] { return index.contains("GPU", 4) && sub.stats().gaps_filled == 1; }))
      << sub.stats().gaps_filled;
  EXPECT_TRUE(index.contains("GPU", 3));
  SubscriberStats s = sub.stats();
  EXPECT_EQ(s.gaps, 1);
  EXPECT_EQ(s.gaps_filled, 1);
  EXPECT_EQ(s.resyncs, 1);

  // 5 and 6 lost, and 5 aged out of the replay buffer: a resync from the snapshot.
  source.set(KvEventsSnapshot{7, {{"GPU", {700}}}});
  pub.publish(7, 7);
  ASSERT_EQ(pub.await_replay_request(), 5);
  pub.reply(6, 6);
  pub.reply(7, 7);
  pub.reply_end();
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().resyncs == 2 && sub.stats().synced; }));
  EXPECT_TRUE(index.contains("GPU", 700));
  EXPECT_FALSE(index.contains("GPU", 4));
  pub.publish(8, 8);
  ASSERT_TRUE(testing::eventually([&] { return index.contains("GPU", 8); }));

  // The instance restarted: its numbers start over.
  source.set(KvEventsSnapshot{0, {{"GPU", {5000}}}});
  pub.publish(0, 9999);
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().restarts == 1 && index.contains("GPU", 5000); }));
  pub.publish(1, 5001);
  ASSERT_TRUE(testing::eventually([&] { return index.contains("GPU", 5001); }));
  EXPECT_FALSE(index.contains("GPU", 9999));
  EXPECT_EQ(sub.stats().gaps_filled, 1);
  sub.stop();
}

// A replay that never answers: a resync once the (short) timeout passes. A slow machine only
// makes the timeout fire later, never not at all.
TEST(KvEventSubscriber, AReplayThatNeverAnswersEndsInAResync) {
  FakePublisher pub;
  SnapshotSourceFake source;
  source.set(KvEventsSnapshot{1, {{"GPU", {100}}}});
  BlockIndex index;
  SteadyClock clock;
  Logger logger(LogLevel::kWarn, stderr);
  KvEventSubscriber sub(config_for(pub, 0.2), index, [&] { return source(); }, clock, logger);
  ASSERT_TRUE(sub.start().is_ok());
  ASSERT_TRUE(pub.await_subscriber());
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().synced; }));
  source.set(KvEventsSnapshot{10, {{"GPU", {1000}}}});
  pub.publish(10, 10);
  ASSERT_EQ(pub.await_replay_request(), 2);
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().resyncs == 2 && index.contains("GPU", 1000); }));
  EXPECT_EQ(sub.stats().gaps_filled, 0);
  EXPECT_FALSE(index.contains("GPU", 10));
  pub.publish(11, 11);
  ASSERT_TRUE(testing::eventually([&] { return index.contains("GPU", 11); }));
  sub.stop();
}

TEST(KvEventSubscriber, AnUnreachableSnapshotLeavesTheIndexEmptyAndRetries) {
  FakePublisher pub;
  int calls = 0;
  bool reachable = false;
  std::mutex m;
  BlockIndex index;
  SteadyClock clock;
  Logger logger(LogLevel::kError, stderr);
  SubscriberConfig config;
  config.endpoint = pub.endpoint();
  config.resync_interval_s = 0.01;
  KvEventSubscriber sub(config, index, [&]() -> Result<KvEventsSnapshot> {
    std::lock_guard lock(m);
    ++calls;
    if (!reachable) return Status::unavailable("connection refused");
    return KvEventsSnapshot{3, {{"GPU", {42}}}};
  }, clock, logger);
  ASSERT_TRUE(sub.start().is_ok());
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().resync_failures >= 2; }));
  EXPECT_FALSE(sub.stats().synced);
  EXPECT_EQ(index.num_blocks(), 0);
  {
    std::lock_guard lock(m);
    reachable = true;
  }
  ASSERT_TRUE(testing::eventually([&] { return sub.stats().synced; }));
  EXPECT_TRUE(index.contains("GPU", 42));
}

// The real publisher and subscriber: the index follows the pool's events exactly.
TEST(KvEventSubscriber, FollowsTheRealPublisher) {
  Logger logger(LogLevel::kWarn, stderr);
  KvEventsConfig pc;
  pc.enable_kv_cache_events = true;
  pc.publisher = "zmq";
  pc.endpoint = "tcp://127.0.0.1:*";
  pc.replay_endpoint = "tcp://127.0.0.1:*";
  auto publisher = KvEventPublisher::create(pc, [] { return 1.0; }, logger);
  ASSERT_TRUE(publisher.is_ok()) << publisher.status().message();
  KvEventPublisher& p = **publisher;
  BlockIndex index;
  SteadyClock clock;
  SubscriberConfig sc;
  sc.endpoint = p.endpoint();
  sc.replay_endpoint = p.replay_endpoint();
  KvEventSubscriber sub(sc, index, [&] { return p.snapshot(); }, clock, logger);
  std::vector<int32_t> tokens = {1, 2};
  kvcache::BlockInfo b;
  b.tokens = tokens;
  b.hash = 1;
  p.on_blocks_stored(std::span<const kvcache::BlockInfo>(&b, 1));  // before the subscriber: in the snapshot
  ASSERT_TRUE(sub.start().is_ok());
  for (uint64_t h = 2; h <= 200; ++h) {
    b.hash = h;
    b.parent_hash = h - 1;
    p.on_blocks_stored(std::span<const kvcache::BlockInfo>(&b, 1));
    if (h % 3 == 0) {
      b.hash = h - 1;
      p.on_block_evicted(b);
    }
  }
  auto truth = p.snapshot();
  ASSERT_TRUE(truth.is_ok());
  // What the router's health checks do: tell the subscriber how far the publisher is, so a batch
  // lost at the tail (before the subscription was in) is noticed.
  int polls = 0;
  ASSERT_TRUE(testing::eventually([&] {
    if (++polls % 50 == 0) sub.note_published(p.stats().last_seq);
    return sub.stats().synced && sub.stats().next_seq == truth->seq + 1;
  }));
  BlockIndex expected;
  expected.reset(*truth);
  EXPECT_EQ(index.num_blocks("GPU"), expected.num_blocks("GPU"));
  for (uint64_t h = 1; h <= 200; ++h) EXPECT_EQ(index.contains("GPU", h), expected.contains("GPU", h)) << h;
}

}  // namespace
}  // namespace pagoda::events
