// What the Redis tier's I/O side makes of what it finds in Redis: records planted by the test
// (garbage, truncated, flipped, another model's, another block's), a full Redis (maxmemory
// with eviction, and without), and a Redis Cluster.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "store/redis_test_env.h"
#include "store/redis_tier.h"
#include "tier_test_util.h"

namespace pagoda::store {
namespace {

using kernels::KvDType;
using namespace pagoda::testing;

RedisTierConfig config_for(const std::string& url, const kvcache::KvLayout& layout) {
  RedisTierConfig c;
  c.topology = *parse_redis_urls({url});
  c.layout = layout;
  c.model_fingerprint = test_ns().model_fingerprint;
  c.kv_format = test_ns().kv_format;
  c.timeouts.connect_ms = 1000;
  c.timeouts.io_ms = 2000;
  return c;
}

// Writes `bytes` to the key with redis-cli -x (the value read from a file, byte for byte).
void plant(const RedisServer& server, const std::string& key, const void* bytes, size_t size) {
  const std::string path = server.dir() + "/plant.bin";
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  ASSERT_EQ(server.cli("-x SET " + key + " < " + path).out, "OK\n");
}

TEST(RedisTierIo, PlantedBadRecordsAreMissesAndAreDeleted) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  const auto layout = test_layout(KvDType::kF16);
  auto tier_or = RedisTier::create(config_for(server->url(), layout), &clock);
  ASSERT_TRUE(tier_or.is_ok());
  RedisTier& tier = **tier_or;
  const auto chain = make_chain(layout, test_ns(), 2, 77);
  const std::string key = tier.key_of(chain[0].meta.block_hash);
  const std::vector<uint64_t> good = chain[0].record();
  const size_t n = static_cast<size_t>(kvcache::record_bytes(chain[0].meta));
  const auto* bytes = reinterpret_cast<const uint8_t*>(good.data());

  struct Case {
    const char* what;
    std::vector<uint8_t> value;
  };
  std::vector<Case> cases;
  cases.push_back({"garbage", {'n', 'o', 't', ' ', 'k', 'v'}});
  cases.push_back({"truncated", std::vector<uint8_t>(bytes, bytes + n - 100)});
  cases.push_back({"header only", std::vector<uint8_t>(bytes, bytes + 128)});
  std::vector<uint8_t> flipped(bytes, bytes + n);
  flipped[n - 5] ^= 1;
  cases.push_back({"flipped payload byte", flipped});
  std::vector<uint8_t> padded(bytes, bytes + n);
  padded.push_back(0);
  cases.push_back({"padded", padded});
  {  // A valid record of another model, under this model's key.
    TestBlock foreign = chain[0];
    foreign.meta.ns.model_fingerprint ^= 1;
    const auto rec = foreign.record();
    cases.push_back({"another model", std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(rec.data()), reinterpret_cast<const uint8_t*>(rec.data()) + n)});
  }
  {  // A valid record of another block (block 1's bytes under block 0's key).
    const auto rec = chain[1].record();
    cases.push_back({"another block", std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(rec.data()), reinterpret_cast<const uint8_t*>(rec.data()) + n)});
  }
  {  // A valid record of another shape (block size 8).
    const auto other = make_chain(test_layout(KvDType::kF16, 8), test_ns(), 1, 5);
    const auto rec = other[0].record();
    const size_t m = static_cast<size_t>(kvcache::record_bytes(other[0].meta));
    cases.push_back({"another shape", std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(rec.data()), reinterpret_cast<const uint8_t*>(rec.data()) + m)});
  }
  std::vector<uint8_t> envelope = {'P', 'G', 'K', 'Z', 1, 0, 0, 0};
  envelope.resize(16 + 40, 0x11);
  cases.push_back({"bogus lz4 envelope", envelope});

  int64_t corrupt = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    plant(*server, key, c.value.data(), c.value.size());
    const auto hashes = hashes_of(chain);
    EXPECT_EQ(wait_op(tier, tier.lookup({hashes.data(), 1})).num_ok, 1);  // a key proposes...
    Gets gets(layout, {chain[0]}, test_ns());
    kvcache::TierCompletion got = wait_op(tier, tier.get(gets.gets));  // ...the record decides
    EXPECT_EQ(got.num_ok, 0);
    EXPECT_FALSE(got.status.is_ok());
    EXPECT_TRUE(gets.dests[0].untouched());
    EXPECT_EQ(tier.stats().corrupt_records, ++corrupt);
    EXPECT_EQ(server->cli("EXISTS " + key).out, "0\n");  // dropped from Redis
  }
  EXPECT_TRUE(tier.enabled());  // bad records are no fault of the server
  EXPECT_EQ(tier.stats().faults, 0);
  // Recomputed and stored again, the block is a hit.
  ASSERT_EQ(wait_op(tier, tier.put(puts_of(chain, 0, 1))).num_ok, 1);
  Gets gets(layout, {chain[0]}, test_ns());
  EXPECT_EQ(wait_op(tier, tier.get(gets.gets)).num_ok, 1);
  EXPECT_TRUE(gets.dests[0].holds(chain[0]));
  // A get expecting another namespace (another tenant's salt) is refused too.
  Gets salted(layout, {chain[0]}, test_ns(/*salt=*/7));
  EXPECT_EQ(wait_op(tier, tier.get(salted.gets)).num_ok, 0);
}

TEST(RedisTierIo, AFullRedisThatEvictsTurnsIntoMisses) {
  auto server = RedisServer::start({"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"});
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  kvcache::KvLayout layout = test_layout(KvDType::kF32);
  layout.head_dim = 128;  // 64 KiB per block
  auto tier_or = RedisTier::create(config_for(server->url(), layout), &clock);
  ASSERT_TRUE(tier_or.is_ok());
  RedisTier& tier = **tier_or;
  const auto chain = make_chain(layout, test_ns(), 96, 13, false);  // ~6 MiB into 2 MiB
  for (size_t i = 0; i < chain.size(); i += 8) EXPECT_EQ(wait_op(tier, tier.put(puts_of(chain, i, 8))).num_ok, 8);
  EXPECT_EQ(tier.stats().put_failures, 0);
  // The newest are still there and intact. Read before the whole chain is: the replies of that
  // 6 MiB get count against maxmemory and may evict any key, the newest too (LRU is sampled).
  Gets last(layout, {chain.back()}, test_ns());
  EXPECT_EQ(wait_op(tier, tier.get(last.gets)).num_ok, 1);
  EXPECT_TRUE(last.dests[0].holds(chain.back()));
  const auto hashes = hashes_of(chain);
  EXPECT_LT(wait_op(tier, tier.lookup(hashes)).num_ok, 96);  // the oldest were evicted
  Gets gets(layout, chain, test_ns());
  kvcache::TierCompletion got = wait_op(tier, tier.get(gets.gets));
  EXPECT_LT(got.num_ok, 96);
  EXPECT_TRUE(tier.enabled());
  EXPECT_EQ(tier.stats().faults, 0);
  EXPECT_EQ(tier.stats().corrupt_records, 0);
}

TEST(RedisTierIo, AFullRedisThatRefusesWritesFailsPutsNotTheTier) {
  auto server = RedisServer::start({"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"});
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  kvcache::KvLayout layout = test_layout(KvDType::kF32);
  layout.head_dim = 128;
  auto tier_or = RedisTier::create(config_for(server->url(), layout), &clock);
  ASSERT_TRUE(tier_or.is_ok());
  RedisTier& tier = **tier_or;
  const auto chain = make_chain(layout, test_ns(), 64, 14, false);
  kvcache::TierCompletion put = wait_op(tier, tier.put(puts_of(chain)));
  EXPECT_LT(put.num_ok, 64);
  EXPECT_GT(put.num_ok, 0);
  EXPECT_NE(put.status.message().find("OOM"), std::string::npos) << put.status.message();
  EXPECT_GT(tier.redis_stats().put_rejected_full, 0);
  EXPECT_TRUE(tier.enabled());
  EXPECT_EQ(tier.stats().faults, 0);
  Gets gets(layout, chain, test_ns());
  EXPECT_EQ(wait_op(tier, tier.get(gets.gets)).num_ok, put.num_ok);  // what was stored reads back
}

TEST(RedisTierIo, ClusterRoundTripKillAndProbe) {
  auto cluster = RedisCluster::start();
  ASSERT_NE(cluster, nullptr);
  ManualClock clock;
  const auto layout = test_layout(KvDType::kBF16);
  auto c = config_for(cluster->url(), layout);
  c.timeouts.io_ms = 1000;
  auto tier_or = RedisTier::create(c, &clock);
  ASSERT_TRUE(tier_or.is_ok());
  RedisTier& tier = **tier_or;
  ASSERT_TRUE(tier.enabled()) << tier.disabled_reason();
  const auto chain = make_chain(layout, test_ns(), 30, 99);
  ASSERT_EQ(wait_op(tier, tier.put(puts_of(chain))).num_ok, 30);
  int on_nodes = 0;
  for (const auto& node : cluster->nodes) on_nodes += std::stoi(node->cli("DBSIZE").out) > 0 ? 1 : 0;
  EXPECT_EQ(on_nodes, 3);  // keys spread over every master by slot
  // Our slot of a key is the cluster's.
  const std::string key = tier.key_of(chain[0].meta.block_hash);
  EXPECT_EQ(cluster->nodes[0]->cli("CLUSTER KEYSLOT " + key).out, std::to_string(key_slot(key)) + "\n");
  Gets gets(layout, chain, test_ns());
  EXPECT_EQ(wait_op(tier, tier.get(gets.gets)).num_ok, 30);
  EXPECT_TRUE(gets.dests[29].holds(chain[29]));

  // A master dies: the cluster is down for us, every op a miss at once.
  const int victim = cluster->owner_of(key_slot(key));
  ASSERT_GE(victim, 0);
  cluster->nodes[victim]->kill();
  const auto hashes = hashes_of(chain);
  EXPECT_EQ(wait_op(tier, tier.lookup(hashes)).num_ok, 0);
  EXPECT_FALSE(tier.enabled());
  // It comes back (same id and slots from its nodes.conf, empty data); a probe re-enables.
  ASSERT_TRUE(cluster->nodes[victim]->restart());
  ASSERT_TRUE(cluster->wait_state_ok());
  clock.advance_ns(c.probe_backoff_initial_ms * 1'000'000);
  settle(tier, tier.redis_stats().probes);
  ASSERT_TRUE(tier.enabled()) << tier.disabled_reason();
  EXPECT_EQ(wait_op(tier, tier.lookup(hashes)).num_ok, 0);  // block 0 lived on the restarted master
  ASSERT_EQ(wait_op(tier, tier.put(puts_of(chain))).num_ok, 30);
  EXPECT_EQ(wait_op(tier, tier.lookup(hashes)).num_ok, 30);
}

}  // namespace
}  // namespace pagoda::store
