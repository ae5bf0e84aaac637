// RedisTier against real redis-server processes: round trips, chains, health and probes,
// timeouts, backpressure, sharding over independent servers.
#include "store/redis_tier.h"

#include <gtest/gtest.h>

#include <regex>

#include "silent_server.h"
#include "store/redis_test_env.h"
#include "tier_test_util.h"

namespace pagoda::store {
namespace {

using kernels::KvDType;
using namespace pagoda::testing;

RedisTierConfig config_for(const std::vector<std::string>& urls, const kvcache::KvLayout& layout) {
  RedisTierConfig c;
  c.topology = *parse_redis_urls(urls);
  c.layout = layout;
  c.model_fingerprint = test_ns().model_fingerprint;
  c.kv_format = test_ns().kv_format;
  c.timeouts.connect_ms = 1000;
  c.timeouts.io_ms = 2000;
  c.instance_nonce = 42;
  return c;
}

std::unique_ptr<RedisTier> make_tier(RedisTierConfig c, const Clock* clock) {
  auto tier = RedisTier::create(std::move(c), clock);
  EXPECT_TRUE(tier.is_ok()) << tier.status().message();
  return tier.is_ok() ? std::move(*tier) : nullptr;
}

TEST(RedisTier, RoundTripsEveryKvFormat) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  std::vector<kvcache::KvLayout> layouts;
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16, KvDType::kFp8E4M3, KvDType::kFp8E5M2, KvDType::kInt8,
                    KvDType::kInt4}) {
    layouts.push_back(test_layout(d));
  }
  layouts.push_back(test_layout(KvDType::kF16, 16, kernels::KvLayoutKind::kNZ));
  layouts.push_back(test_layout(KvDType::kInt8, 5));  // odd block size
  for (const kvcache::KvLayout& layout : layouts) {
    SCOPED_TRACE(std::string(kernels::kv_dtype_name(layout.dtype)) + " " + std::string(kernels::kv_layout_name(layout.layout)) +
                 " b" + std::to_string(layout.block_size));
    auto tier = make_tier(config_for({server->url()}, layout), &clock);
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(tier->enabled()) << tier->disabled_reason();
    const auto chain = make_chain(layout, test_ns(), 3, 17);
    const auto puts = puts_of(chain);
    kvcache::TierCompletion put = wait_op(*tier, tier->put(puts));
    EXPECT_EQ(put.kind, kvcache::TierOpKind::kPut);
    EXPECT_EQ(put.num_ok, 3);
    EXPECT_EQ(put.bytes, 3 * kvcache::record_bytes(chain[0].meta));
    const auto hashes = hashes_of(chain);
    EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, 3);
    Gets gets(layout, chain, test_ns());
    kvcache::TierCompletion got = wait_op(*tier, tier->get(gets.gets));
    EXPECT_EQ(got.num_ok, 3) << got.status.message();
    for (size_t i = 0; i < chain.size(); ++i) EXPECT_TRUE(gets.dests[i].holds(chain[i])) << i;
    // One key per block, named as documented, holding exactly the record.
    const std::string key = tier->key_of(chain[1].meta.block_hash);
    EXPECT_TRUE(std::regex_match(key, std::regex("pagoda@feedface12345678@[a-z0-9-]+-(nd|nz)-b[0-9]+@[0-9a-f]{16}"))) << key;
    EXPECT_EQ(server->cli("STRLEN " + key).out, std::to_string(kvcache::record_bytes(chain[1].meta)) + "\n");
    server->cli("FLUSHALL");
  }
}

TEST(RedisTier, ChainsStopAtTheFirstMissingBlock) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  const auto layout = test_layout();
  auto tier = make_tier(config_for({server->url()}, layout), &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 5, 3);
  auto puts = puts_of(chain);
  puts.erase(puts.begin() + 2);  // blocks 0, 1, 3, 4
  EXPECT_EQ(wait_op(*tier, tier->put(puts)).num_ok, 4);
  const auto hashes = hashes_of(chain);
  EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, 2);
  Gets gets(layout, chain, test_ns());
  kvcache::TierCompletion got = wait_op(*tier, tier->get(gets.gets));
  EXPECT_EQ(got.num_items, 5);
  EXPECT_EQ(got.num_ok, 2);
  EXPECT_TRUE(gets.dests[1].holds(chain[1]));
  EXPECT_TRUE(gets.dests[2].untouched());
  EXPECT_TRUE(gets.dests[3].untouched());  // after the first miss nothing is read
  EXPECT_EQ(tier->redis_stats().missing_records, 1);
  // A block put again is refreshed, not sent again.
  const int64_t written = tier->stats().bytes_written;
  kvcache::TierCompletion again = wait_op(*tier, tier->put(puts));
  EXPECT_EQ(again.num_ok, 4);
  EXPECT_EQ(again.bytes, 0);
  EXPECT_EQ(tier->stats().bytes_written, written);
  EXPECT_EQ(tier->redis_stats().put_skipped_existing, 4);
  // Erase drops them.
  tier->erase(hashes);
  EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, 0);  // ops run in order on the I/O thread
  EXPECT_EQ(server->cli("DBSIZE").out, "0\n");
}

TEST(RedisTier, TtlIsSetAndRefreshed) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  const auto layout = test_layout();
  auto c = config_for({server->url()}, layout);
  c.ttl_seconds = 1000;
  auto tier = make_tier(c, &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 1, 5);
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 1);
  const std::string key = tier->key_of(chain[0].meta.block_hash);
  const int ttl = std::stoi(server->cli("TTL " + key).out);
  EXPECT_GT(ttl, 900);
  EXPECT_LE(ttl, 1000);
  server->cli("EXPIRE " + key + " 5");
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 1);  // present: EXPIRE, not SET
  EXPECT_GT(std::stoi(server->cli("TTL " + key).out), 900);
  // Without a TTL keys never expire.
  auto plain = make_tier(config_for({server->url()}, layout), &clock);
  const auto other = make_chain(layout, test_ns(), 1, 6);
  ASSERT_EQ(wait_op(*plain, plain->put(puts_of(other))).num_ok, 1);
  EXPECT_EQ(server->cli("TTL " + plain->key_of(other[0].meta.block_hash)).out, "-1\n");
}

TEST(RedisTier, CompressedRecordsRoundTripAndAreReadByEveryInstance) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  const auto layout = test_layout(KvDType::kF16);
  auto plain = make_tier(config_for({server->url()}, layout), &clock);
  for (RedisCompression codec : {RedisCompression::kLz4, RedisCompression::kZstd}) {
    SCOPED_TRACE(std::string(redis_compression_name(codec)));
    server->cli("FLUSHALL");
    auto c = config_for({server->url()}, layout);
    c.compression = codec;
    auto tier = make_tier(c, &clock);
    ASSERT_NE(tier, nullptr);
    const auto chain = make_chain(layout, test_ns(), 4, 8);
    kvcache::TierCompletion put = wait_op(*tier, tier->put(puts_of(chain)));
    ASSERT_EQ(put.num_ok, 4);
    const RedisTierStats s = tier->redis_stats();
    EXPECT_EQ(s.raw_bytes_written, 4 * kvcache::record_bytes(chain[0].meta));
    // The exponent plane compresses (zstd's entropy coder much better than lz4's matches).
    EXPECT_LT(tier->stats().bytes_written, codec == RedisCompression::kZstd ? s.raw_bytes_written * 3 / 4 : s.raw_bytes_written);
    EXPECT_GT(s.compress_ns, 0);
    EXPECT_EQ(server->cli("GETRANGE " + tier->key_of(chain[0].meta.block_hash) + " 0 3").out, "PGKZ\n");
    // An instance that writes plain records reads compressed ones (mixed deployments).
    Gets gets(layout, chain, test_ns());
    EXPECT_EQ(wait_op(*plain, plain->get(gets.gets)).num_ok, 4);
    for (size_t i = 0; i < chain.size(); ++i) EXPECT_TRUE(gets.dests[i].holds(chain[i]));
  }
}

TEST(RedisTier, IncompressibleBlocksAreStoredPlainEachUnderItsOwnKey) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  kvcache::KvLayout layout = test_layout(KvDType::kF32);
  layout.head_dim = 256;  // 128 KiB of random payload per block: lz4 cannot shrink it
  auto c = config_for({server->url()}, layout);
  c.compression = RedisCompression::kLz4;
  c.shuffle = false;
  auto tier = make_tier(c, &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 6, 12, /*exponent_like=*/false);  // random bytes
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 6);
  EXPECT_EQ(tier->stats().bytes_written, tier->redis_stats().raw_bytes_written);  // stored plain
  EXPECT_EQ(server->cli("GETRANGE " + tier->key_of(chain[0].meta.block_hash) + " 0 3").out, "PGKV\n");
  Gets gets(layout, chain, test_ns());
  EXPECT_EQ(wait_op(*tier, tier->get(gets.gets)).num_ok, 6);
  for (size_t i = 0; i < chain.size(); ++i) EXPECT_TRUE(gets.dests[i].holds(chain[i])) << i;
}

TEST(RedisTier, AKilledRedisIsAMissThenAProbeReEnablesIt) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  ManualClock clock;
  const auto layout = test_layout();
  auto c = config_for({server->url()}, layout);
  c.probe_backoff_initial_ms = 1000;
  auto tier = make_tier(c, &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 4, 21);
  const auto hashes = hashes_of(chain);
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 4);

  server->kill();
  Gets gets(layout, chain, test_ns());
  kvcache::TierCompletion got = wait_op(*tier, tier->get(gets.gets));
  EXPECT_EQ(got.num_ok, 0);
  EXPECT_EQ(got.status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(gets.dests[0].untouched());
  EXPECT_FALSE(tier->enabled());
  EXPECT_NE(tier->disabled_reason().find(server->address()), std::string::npos) << tier->disabled_reason();
  EXPECT_EQ(tier->stats().faults, 1);
  // While down every op is answered at once, without I/O.
  const int64_t connects = tier->redis_stats().shards.connects;
  EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, 0);
  EXPECT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 0);
  EXPECT_EQ(tier->redis_stats().shards.connects, connects);
  EXPECT_GE(tier->redis_stats().items_while_down, 8);

  // A probe before the server is back fails and doubles the backoff.
  clock.advance_ns(1'000'000'000);
  settle(*tier, tier->redis_stats().probes);
  EXPECT_EQ(tier->redis_stats().probe_failures, 1);
  EXPECT_FALSE(tier->enabled());
  ASSERT_TRUE(server->restart());
  clock.advance_ns(1'999'000'000);  // not yet due (2 s after the failed probe)
  const int64_t probes = tier->redis_stats().probes;
  std::vector<kvcache::TierCompletion> none;
  tier->poll(none);
  EXPECT_FALSE(tier->enabled());
  clock.advance_ns(1'000'000);
  settle(*tier, probes);
  ASSERT_TRUE(tier->enabled()) << tier->disabled_reason();
  EXPECT_EQ(tier->redis_stats().recoveries, 1);
  // The restarted Redis is empty: a miss, then the recomputed blocks are stored again.
  EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, 0);
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 4);
  Gets again(layout, chain, test_ns());
  EXPECT_EQ(wait_op(*tier, tier->get(again.gets)).num_ok, 4);
  EXPECT_TRUE(again.dests[3].holds(chain[3]));
}

TEST(RedisTier, AServerThatStopsAnsweringTimesOut) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  ManualClock clock;
  const auto layout = test_layout();
  auto c = config_for({server->url()}, layout);
  c.timeouts.io_ms = 200;
  auto tier = make_tier(c, &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 2, 4);
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 2);
  ASSERT_TRUE(server->freeze());  // accepts, never answers
  const auto hashes = hashes_of(chain);
  kvcache::TierCompletion looked = wait_op(*tier, tier->lookup(hashes));
  EXPECT_EQ(looked.num_ok, 0);
  EXPECT_NE(looked.status.message().find("timed out"), std::string::npos) << looked.status.message();
  EXPECT_FALSE(tier->enabled());
  EXPECT_EQ(tier->redis_stats().shards.timeouts, 1);
  server->thaw();
  clock.advance_ns(c.probe_backoff_initial_ms * 1'000'000);
  settle(*tier, tier->redis_stats().probes);
  EXPECT_TRUE(tier->enabled()) << tier->disabled_reason();
  EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, 2);  // the data survived the pause
}

TEST(RedisTier, ASilentServerAtStartUpStartsDownWithinTheTimeouts) {
  SilentServer silent;
  ASSERT_GT(silent.port(), 0);
  ManualClock clock;
  auto c = config_for({"redis://127.0.0.1:" + std::to_string(silent.port())}, test_layout());
  c.timeouts.io_ms = 100;
  auto tier = make_tier(c, &clock);
  ASSERT_NE(tier, nullptr);
  EXPECT_FALSE(tier->enabled());
  EXPECT_NE(tier->disabled_reason().find("timed out"), std::string::npos) << tier->disabled_reason();
  const auto chain = make_chain(test_layout(), test_ns(), 1, 1);
  Gets gets(test_layout(), chain, test_ns());
  EXPECT_EQ(wait_op(*tier, tier->get(gets.gets)).num_ok, 0);
  // A refused port too.
  auto refused = make_tier(config_for({"redis://127.0.0.1:" + std::to_string(free_loopback_port())}, test_layout()), &clock);
  ASSERT_NE(refused, nullptr);
  EXPECT_FALSE(refused->enabled());
}

TEST(RedisTier, PutsBeyondTheInFlightBoundAreRefusedAtOnce) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  ManualClock clock;
  const auto layout = test_layout();
  auto c = config_for({server->url()}, layout);
  c.timeouts.io_ms = 300;
  c.max_inflight_put_bytes = 3 * (layout.bytes_per_block() + layout.block_size * 4) / 2;  // 1.5 blocks
  auto tier = make_tier(c, &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 2, 9);
  ASSERT_TRUE(server->freeze());  // the first put stays in flight until its timeout
  const kvcache::TierOpId first = tier->put(puts_of(chain, 0, 1));
  const kvcache::TierOpId second = tier->put(puts_of(chain, 1, 1));
  kvcache::TierCompletion refused = wait_op(*tier, second);
  EXPECT_EQ(refused.num_ok, 0);
  EXPECT_NE(refused.status.message().find("in flight"), std::string::npos) << refused.status.message();
  EXPECT_EQ(tier->redis_stats().put_rejected_backpressure, 1);
  EXPECT_EQ(wait_op(*tier, first).num_ok, 0);  // timed out
  server->thaw();
}

TEST(RedisTier, IndependentServersShareTheBlocksAndFailApart) {
  auto a = RedisServer::start();
  auto b = RedisServer::start();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ManualClock clock;
  const auto layout = test_layout(KvDType::kInt8);
  auto tier = make_tier(config_for({a->url(), b->url()}, layout), &clock);
  ASSERT_NE(tier, nullptr);
  const auto chain = make_chain(layout, test_ns(), 64, 31);
  ASSERT_EQ(wait_op(*tier, tier->put(puts_of(chain))).num_ok, 64);
  const int on_a = std::stoi(a->cli("DBSIZE").out), on_b = std::stoi(b->cli("DBSIZE").out);
  EXPECT_EQ(on_a + on_b, 64);
  EXPECT_GT(on_a, 16);
  EXPECT_GT(on_b, 16);
  Gets gets(layout, chain, test_ns());
  EXPECT_EQ(wait_op(*tier, tier->get(gets.gets)).num_ok, 64);
  b->kill();
  // Blocks up to the first one on b are still hits; the tier stays enabled on a.
  const auto hashes = hashes_of(chain);
  int64_t first_on_b = 0;
  while (first_on_b < 64 && a->cli("EXISTS " + tier->key_of(hashes[first_on_b])).out == "1\n") ++first_on_b;
  (void)wait_op(*tier, tier->lookup(hashes));  // finds b dead
  EXPECT_TRUE(tier->enabled());
  EXPECT_EQ(tier->redis_stats().shards_down, 1);
  EXPECT_EQ(wait_op(*tier, tier->lookup(hashes)).num_ok, first_on_b);
  std::vector<kvcache::BlockHash> only_a;
  for (kvcache::BlockHash h : hashes) {
    if (a->cli("EXISTS " + tier->key_of(h)).out == "1\n") only_a.push_back(h);
  }
  EXPECT_EQ(wait_op(*tier, tier->lookup(only_a)).num_ok, static_cast<int64_t>(only_a.size()));
}

TEST(RedisTier, DestroyingTheTierWithOpsInFlightIsSafe) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  const auto layout = test_layout();
  const auto chain = make_chain(layout, test_ns(), 8, 2);
  Gets gets(layout, chain, test_ns());
  {
    auto tier = make_tier(config_for({server->url()}, layout), &clock);
    ASSERT_NE(tier, nullptr);
    (void)tier->put(puts_of(chain));
    (void)tier->get(gets.gets);
  }  // joins the I/O thread: nothing writes into `gets` after this
  SUCCEED();
}

// A process that exits right after its reply (`pagoda run`) destroys the tier with puts still
// queued: they are sent before the I/O thread stops (one put per block: 32 queued jobs).
TEST(RedisTier, PutsQueuedAtDestructionAreStillSent) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  SteadyClock clock;
  const auto layout = test_layout();
  const auto chain = make_chain(layout, test_ns(), 32, 5);
  {
    auto tier = make_tier(config_for({server->url()}, layout), &clock);
    ASSERT_NE(tier, nullptr);
    for (size_t i = 0; i < chain.size(); ++i) (void)tier->put(puts_of(chain, i, 1));
  }
  auto reader = make_tier(config_for({server->url()}, layout), &clock);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(wait_op(*reader, reader->lookup(hashes_of(chain))).num_ok, 32);
}

}  // namespace
}  // namespace pagoda::store
