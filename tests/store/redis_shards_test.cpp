#include "store/redis_shards.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <array>

#include "store/redis_test_env.h"

namespace pagoda::store {
namespace {

using testing::RedisCluster;
using testing::RedisServer;

TEST(RedisShards, JumpHashSpreadsAndMovesLittle) {
  std::array<int, 4> count{};
  int moved = 0;
  for (uint64_t k = 0; k < 20000; ++k) {
    const uint64_t key = k * 0x9e3779b97f4a7c15ULL;
    const int b3 = jump_hash(key, 3), b4 = jump_hash(key, 4);
    ++count[b4];
    if (b3 != b4) {
      ++moved;
      EXPECT_EQ(b4, 3);  // a key only ever moves to the new server
    }
  }
  for (int c : count) EXPECT_NEAR(c, 5000, 500);
  EXPECT_NEAR(moved, 5000, 500);
  EXPECT_EQ(jump_hash(12345, 1), 0);
}

std::vector<RedisRequest> sets(const std::vector<std::string>& keys, const std::string& value, const std::vector<int>& shard) {
  std::vector<RedisRequest> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    out[i].shard = shard[i];
    out[i].key = keys[i];
    out[i].args.add("SET").add(keys[i]).add(value);
  }
  return out;
}

std::vector<RedisRequest> gets(const std::vector<std::string>& keys, const std::vector<int>& shard) {
  std::vector<RedisRequest> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    out[i].shard = shard[i];
    out[i].key = keys[i];
    out[i].args.add("GET").add(keys[i]);
  }
  return out;
}

TEST(RedisShards, AShardGoesDownAloneAndComesBackByProbe) {
  auto a = RedisServer::start(), b = RedisServer::start();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  RedisShards shards(*parse_redis_urls({a->url(), b->url()}), {}, 5);
  const std::vector<std::string> keys = {"x", "y"};
  const std::vector<int> where = {0, 1};
  std::vector<RedisResponse> out(2);
  shards.execute(sets(keys, "v", where), out);
  EXPECT_EQ(reply_text(out[0].reply.get()), "OK");
  EXPECT_EQ(reply_text(out[1].reply.get()), "OK");
  b->kill();
  shards.execute(gets(keys, where), out);
  EXPECT_EQ(reply_text(out[0].reply.get()), "v");
  EXPECT_EQ(out[1].reply, nullptr);
  EXPECT_FALSE(out[1].status.is_ok());
  auto faults = shards.take_faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].first, 1);
  EXPECT_TRUE(shards.down(1));
  const int64_t connects = shards.stats().connects;
  shards.execute(gets(keys, where), out);  // down: answered without trying
  EXPECT_NE(out[1].status.message().find("is down"), std::string::npos);
  EXPECT_EQ(shards.stats().connects, connects);
  EXPECT_FALSE(shards.probe(1, "probe-bytes", 7).is_ok());
  ASSERT_TRUE(b->restart());
  ASSERT_TRUE(shards.probe(1, "probe-bytes", 7).is_ok());
  EXPECT_FALSE(shards.down(1));
  EXPECT_EQ(b->cli("DBSIZE").out, "0\n");  // the probe key is deleted after its round trip
  shards.execute(sets(keys, "w", where), out);
  EXPECT_EQ(reply_text(out[1].reply.get()), "OK");
}

TEST(RedisShards, ClusterFollowsAskDuringAReshardAndMovedAfterIt) {
  auto cluster = RedisCluster::start();
  ASSERT_NE(cluster, nullptr);
  RedisShards shards(*parse_redis_urls({cluster->url()}), {}, 5);
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) keys.push_back("k" + std::to_string(i));
  const std::vector<int> zero(keys.size(), 0);
  std::vector<RedisResponse> out(keys.size());
  shards.execute(sets(keys, "v1", zero), out);
  for (const RedisResponse& r : out) ASSERT_EQ(reply_text(r.reply.get()), "OK") << r.status.message();
  EXPECT_EQ(shards.stats().moved_redirects, 0);  // the slot map routed every key

  // Move k0's slot from its owner A to B by hand, as redis-cli --cluster reshard does.
  const int slot = key_slot("k0");
  const int a = cluster->owner_of(slot);
  ASSERT_GE(a, 0);
  const int b = (a + 1) % 3;
  const std::string id_a = cluster->node_id(a), id_b = cluster->node_id(b);
  const auto& node_a = cluster->nodes[a];
  const auto& node_b = cluster->nodes[b];
  ASSERT_EQ(node_b->cli("CLUSTER SETSLOT " + std::to_string(slot) + " IMPORTING " + id_a).out, "OK\n");
  ASSERT_EQ(node_a->cli("CLUSTER SETSLOT " + std::to_string(slot) + " MIGRATING " + id_b).out, "OK\n");
  ASSERT_EQ(node_a->cli("MIGRATE 127.0.0.1 " + std::to_string(node_b->port()) + " k0 0 5000").out, "OK\n");

  // Mid-migration: A answers -ASK for k0 (gone from A); the shards follow with ASKING.
  std::vector<RedisResponse> one(1);
  shards.execute(gets({"k0"}, {0}), one);
  EXPECT_EQ(reply_text(one[0].reply.get()), "v1") << one[0].status.message();
  EXPECT_GE(shards.stats().ask_redirects, 1);
  EXPECT_EQ(shards.stats().moved_redirects, 0);
  // A new key of the migrating slot goes to B the same way.
  shards.execute(sets({"{k0}new"}, "v2", {0}), one);
  EXPECT_EQ(reply_text(one[0].reply.get()), "OK") << one[0].status.message();

  // Done: the slot is B's. A stale map is corrected by -MOVED, then refreshed.
  for (int n : {b, a, (a + 2) % 3}) {
    ASSERT_EQ(cluster->nodes[n]->cli("CLUSTER SETSLOT " + std::to_string(slot) + " NODE " + id_b).out, "OK\n");
  }
  const int64_t refreshes = shards.stats().slot_map_refreshes;
  shards.execute(gets({"k0", "{k0}new"}, {0, 0}), out = std::vector<RedisResponse>(2));
  EXPECT_EQ(reply_text(out[0].reply.get()), "v1") << out[0].status.message();
  EXPECT_EQ(reply_text(out[1].reply.get()), "v2") << out[1].status.message();
  EXPECT_GE(shards.stats().moved_redirects, 1);
  const int64_t moved = shards.stats().moved_redirects;
  shards.execute(gets(keys, zero), out = std::vector<RedisResponse>(keys.size()));
  for (const RedisResponse& r : out) EXPECT_EQ(reply_text(r.reply.get()), "v1");
  EXPECT_EQ(shards.stats().moved_redirects, moved);  // the map knows now
  EXPECT_GT(shards.stats().slot_map_refreshes, refreshes);
  EXPECT_TRUE(shards.take_faults().empty());
}

TEST(RedisShards, ClusterProbeRoundTripsOnEveryMaster) {
  auto cluster = RedisCluster::start();
  ASSERT_NE(cluster, nullptr);
  RedisShards shards(*parse_redis_urls({cluster->url()}), {}, 5);
  ASSERT_TRUE(shards.probe(0, "bytes", 1).is_ok());
  for (const auto& n : cluster->nodes) EXPECT_EQ(n->cli("DBSIZE").out, "0\n");
  // A cluster that lost coverage of a slot is not up.
  const int a = cluster->owner_of(100);
  ASSERT_EQ(cluster->nodes[a]->cli("CLUSTER DELSLOTS 100").out, "OK\n");
  Status s = shards.probe(0, "bytes", 1);
  EXPECT_FALSE(s.is_ok());
  EXPECT_TRUE(shards.down(0));
}

}  // namespace
}  // namespace pagoda::store
