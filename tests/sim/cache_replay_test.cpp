// Trace reading and cache-mode replay (sim/trace.h, sim/cache_replay.h): the Mooncake format
// and its errors, token synthesis that keeps exactly the trace's sharing, hits by hand on a
// small trace, and the ceiling of Mooncake's synthetic trace against a count made from its
// hash_ids alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/clock.h"
#include "sim/cache_replay.h"
#include "sim/trace.h"
#include "test_data.h"

namespace pagoda::sim {
namespace {

std::string line(double ts, int64_t in, int64_t out, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " + std::to_string(in) +
         ", \"output_length\": " + std::to_string(out) + ", \"hash_ids\": [" + ids + "]}\n";
}

TEST(Trace, ReadsMooncakeAndPlainLinesAndSaysWhatIsWrong) {
  TraceOptions o;
  o.block_tokens = 4;
  auto t = parse_trace(line(0, 7, 3, "1, 2") + "\n" + line(5, 4, 0, "1"), o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].input_length, 7);
  EXPECT_EQ((*t)[0].output_length, 3);
  EXPECT_EQ((*t)[0].hash_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ((*t)[1].timestamp_ms, 5);
  auto plain = parse_trace("{\"prompt_token_ids\": [5, 6, 7], \"output_length\": 2}\n{\"tokens\": [1]}\n", o);
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_EQ((*plain)[0].prompt_tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ((*plain)[1].input_length, 1);
  o.max_requests = 1;
  EXPECT_EQ(parse_trace(line(0, 4, 1, "1") + line(1, 4, 1, "2"), o)->size(), 1u);
  o.max_requests = 0;

  auto error = [&](const std::string& text) { return parse_trace(text, o, "t.jsonl").status().message(); };
  EXPECT_EQ(error(line(0, 4, 1, "1") + "{oops\n"), "t.jsonl:2: not valid JSON");
  EXPECT_NE(error(line(0, 9, 1, "1, 2")).find("needs 3 hash_ids of 4-token blocks, the line has 2"), std::string::npos);
  EXPECT_NE(error(line(0, 4, 1, "-1")).find("\"hash_ids\" must hold integers >= 0"), std::string::npos);
  EXPECT_NE(error(line(5, 4, 1, "1") + line(4, 4, 1, "1")).find("t.jsonl:2: timestamp"), std::string::npos);
  EXPECT_NE(error("{\"timestamp\": 0, \"hash_ids\": [1]}\n").find("missing \"input_length\""), std::string::npos);
  EXPECT_NE(error("{\"prompt_token_ids\": [40000]}\n").find("below the vocabulary size 32000"), std::string::npos);
  EXPECT_NE(error("{\"prompt_token_ids\": [1], \"hash_ids\": [1], \"input_length\": 1}\n").find("both"), std::string::npos);
  EXPECT_NE(error("[1, 2]\n").find("must be a JSON object"), std::string::npos);
  EXPECT_EQ(error("\n\n"), "t.jsonl: no requests");
  EXPECT_NE(read_trace("/nonexistent/trace.jsonl", o).status().message().find("cannot open trace"), std::string::npos);
}

TEST(Trace, SynthesizedTokensShareExactlyWhatTheIdsShare) {
  TraceOptions o;
  o.block_tokens = 8;
  auto t = parse_trace(line(0, 20, 1, "10, 11, 12") + line(1, 13, 1, "10, 11") + line(2, 16, 1, "10, 99"), o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  std::vector<int32_t> a, b, c;
  synthesize_prompt((*t)[0], o, a);
  synthesize_prompt((*t)[1], o, b);
  synthesize_prompt((*t)[2], o, c);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 13u);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));             // ids 10, 11: the first 13 tokens
  EXPECT_TRUE(std::equal(c.begin(), c.begin() + 8, a.begin()));       // id 10
  EXPECT_FALSE(std::equal(c.begin() + 8, c.end(), a.begin() + 8));    // 99 is not 11
  for (int32_t tok : a) EXPECT_TRUE(tok >= 0 && tok < o.vocab_size);

  // Reduced scale: ids of 8-token blocks replayed as 2-token runs, lengths scaled alike (20 -> 5).
  TraceOptions small = o;
  small.replay_block_tokens = 2;
  auto s = parse_trace(line(0, 20, 1, "10, 11, 12") + line(1, 13, 1, "10, 11"), small);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ((*s)[0].input_length, 5);
  EXPECT_EQ((*s)[1].input_length, 4);  // ceil(13 x 2 / 8)
  std::vector<int32_t> sa, sb;
  synthesize_prompt((*s)[0], small, sa);
  synthesize_prompt((*s)[1], small, sb);
  ASSERT_EQ(sa.size(), 5u);
  EXPECT_TRUE(std::equal(sb.begin(), sb.end(), sa.begin()));
  EXPECT_TRUE(std::equal(sa.begin(), sa.begin() + 2, a.begin()));  // id 10's run starts alike
}

// Block size 4 = trace block 4, a pool of 4 blocks, LRU; a sequence releases its blocks tail
// first, so a chain's last block is the least recently used of it.
//   A [1,2]    8 tokens: hits 0 (a hit never covers the last token); 1, 2 cached.
//   B [1,2,3] 12 tokens: hits 1, 2 (8 tokens); 3 cached.
//   C [7,8,9] 12 tokens: hits 0; needs 3 blocks: the free one, then evicts 3 and 2.
//   D [1,2,3] 12 tokens: hits 1 (4 tokens; 2 is gone); needs 2 blocks: evicts 9 and 8.
//   E 20 blocks: larger than the pool, rejected.
TEST(CacheReplay, HitsEvictionsAndRejectionsByHand) {
  TraceOptions o;
  o.block_tokens = 4;
  const std::string text = line(0, 8, 1, "1, 2") + line(1, 12, 1, "1, 2, 3") + line(2, 12, 1, "7, 8, 9") +
                           line(3, 12, 1, "1, 2, 3") + line(4, 80, 1, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
                                                                    "14, 15, 16, 17, 18, 19, 20");
  auto t = parse_trace(text, o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  CacheReplayOptions ro;
  ro.block_size = 4;
  ro.trace = o;
  ro.capacity_tokens = 16;
  auto r = replay_cache(*t, ro);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->requests, 5);
  EXPECT_EQ(r->rejected, 1);
  EXPECT_EQ(r->capacity_blocks, 4);
  EXPECT_EQ(r->prompt_tokens, 8 + 12 + 12 + 12 + 80);
  EXPECT_EQ(r->hit_tokens, 8 + 4);
  EXPECT_EQ(r->evictions, 4);
  EXPECT_EQ(r->peak_blocks_held, 4);

  ro.capacity_tokens = 0;  // unbounded: nothing evicted; B and D hit 8 each, E fits and hits 1, 2, 3
  auto ceiling = replay_cache(*t, ro);
  ASSERT_TRUE(ceiling.is_ok());
  EXPECT_EQ(ceiling->hit_tokens, 8 + 8 + 12);
  EXPECT_EQ(ceiling->evictions, 0);
  EXPECT_EQ(ceiling->rejected, 0);
  EXPECT_EQ(ceiling->capacity_blocks, unbounded_capacity_blocks(*t, 4));

  ro.capacity_tokens = 3;
  EXPECT_FALSE(replay_cache(*t, ro).is_ok());  // less than one block
}

// The same trace shape with one tier below a pool of 4 blocks (the real TierStack, write-back),
// a host tier or a remote one (a Redis tier's semantics) in its place, the same by hand:
//   A [1,2]: 1, 2 cached. B [7,8,9]: needs 3 blocks, evicts 2 (the LRU) -> the tier.
//   C [1,2,3]: pool hits 1 (4 tokens); the tier holds 2: loaded (4 tokens), its fresh block
//   evicts 9 -> the tier; block 3 evicts 8 -> the tier.
TEST(CacheReplay, ATierBelowThePoolServesWhatThePoolEvicted) {
  TraceOptions o;
  o.block_tokens = 4;
  auto t = parse_trace(line(0, 8, 1, "1, 2") + line(1, 12, 1, "7, 8, 9") + line(2, 12, 1, "1, 2, 3"), o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ManualClock clock;
  for (const std::string tier : {"host", "remote"}) {
    SCOPED_TRACE(tier);
    CacheReplayOptions ro;
    ro.block_size = 4;
    ro.trace = o;
    ro.capacity_tokens = 16;
    (tier == "host" ? ro.host_tokens : ro.remote_tokens) = 32;
    ro.kv_bytes_per_token = 1000;
    ro.clock = &clock;
    auto r = replay_cache(*t, ro);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->hit_tokens, 8);
    EXPECT_EQ(r->pool_hit_tokens, 4);
    ASSERT_EQ(r->tiers.size(), 1u);
    EXPECT_EQ(r->tiers[0].name, tier);
    EXPECT_EQ(r->tiers[0].capacity_blocks, 8);
    EXPECT_EQ(r->tiers[0].hit_tokens, 4);
    EXPECT_EQ(r->tiers[0].stored_blocks, 3);
    EXPECT_EQ(r->tiers[0].loaded_blocks, 1);
    EXPECT_EQ(r->tiers[0].dropped_writes, 0);
    EXPECT_EQ(r->tiers[0].bytes_in, 3 * 4 * 1000);
    EXPECT_EQ(r->tiers[0].bytes_out, 4 * 1000);

    ro.capacity_tokens = 0;  // tiers below an unbounded pool: refused
    EXPECT_FALSE(replay_cache(*t, ro).is_ok());
    ro.capacity_tokens = 16;
    ro.clock = nullptr;
    EXPECT_FALSE(replay_cache(*t, ro).is_ok());
  }
  CacheReplayOptions ro;  // a remote tier smaller than a block
  ro.block_size = 4;
  ro.trace = o;
  ro.capacity_tokens = 16;
  ro.remote_tokens = 3;
  ro.clock = &clock;
  auto tiny = replay_cache(*t, ro);
  ASSERT_FALSE(tiny.is_ok());
  EXPECT_NE(tiny.status().message().find("remote tier"), std::string::npos) << tiny.status().message();
}

// Host and disk tiers on a slice of Mooncake's trace: every hit is the pool's or a tier's, the
// tiers add hits to the pool's, nothing is dropped, and the ceiling bounds it all.
TEST(CacheReplay, HostAndDiskTiersOnATraceSlice) {
  const std::string path = testing::test_data_dir() + "/traces/mooncake-synthetic.jsonl";
  ASSERT_TRUE(testing::file_exists(path)) << path << " is missing (PAGODA_TEST_DATA)";
  TraceOptions o;
  o.max_requests = 300;
  auto t = read_trace(path, o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  const std::string dir = ::testing::TempDir() + "/replay-disk-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  SteadyClock clock;
  CacheReplayOptions ro;
  ro.block_size = 512;
  ro.trace = o;
  ro.capacity_tokens = 200000;
  auto pool_only = replay_cache(*t, ro);
  ASSERT_TRUE(pool_only.is_ok()) << pool_only.status().message();
  ro.host_tokens = 200000;
  ro.disk_tokens = 2000000;
  ro.disk_dir = dir;
  ro.clock = &clock;
  auto tiered = replay_cache(*t, ro);
  ASSERT_TRUE(tiered.is_ok()) << tiered.status().message();
  ASSERT_EQ(tiered->tiers.size(), 2u);
  EXPECT_EQ(tiered->pool_hit_tokens + tiered->tiers[0].hit_tokens + tiered->tiers[1].hit_tokens, tiered->hit_tokens);
  EXPECT_GT(tiered->tiers[0].hit_tokens, 0);
  EXPECT_GT(tiered->tiers[1].hit_tokens, 0);
  EXPECT_GT(tiered->tiers[1].stored_blocks, 0);  // demotions from the host tier
  EXPECT_EQ(tiered->tiers[0].dropped_writes + tiered->tiers[1].dropped_writes, 0);
  EXPECT_GT(tiered->hit_tokens, pool_only->hit_tokens);
  // A remote tier below a smaller disk tier: the disk tier's evictions go down to it, it
  // serves hits of its own, and the stack serves at least what it served without it.
  ro.disk_tokens = 300000;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto small = replay_cache(*t, ro);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  ro.remote_tokens = 4000000;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto remote = replay_cache(*t, ro);
  ASSERT_TRUE(remote.is_ok()) << remote.status().message();
  ASSERT_EQ(remote->tiers.size(), 3u);
  EXPECT_EQ(remote->tiers[2].name, "remote");
  int64_t by_tier = remote->pool_hit_tokens;
  for (const TierReplayStats& ts : remote->tiers) by_tier += ts.hit_tokens;
  EXPECT_EQ(by_tier, remote->hit_tokens);
  EXPECT_GT(remote->tiers[2].stored_blocks, 0);
  EXPECT_GT(remote->tiers[2].hit_tokens, 0);
  EXPECT_GT(remote->hit_tokens, small->hit_tokens);
  ro.capacity_tokens = 0;
  ro.host_tokens = ro.disk_tokens = ro.remote_tokens = 0;
  auto ceiling = replay_cache(*t, ro);
  ASSERT_TRUE(ceiling.is_ok());
  EXPECT_LE(tiered->hit_tokens, ceiling->hit_tokens);
  EXPECT_LE(remote->hit_tokens, ceiling->hit_tokens);
  std::filesystem::remove_all(dir);
}

// The ceiling from hash_ids alone, as the trace's README defines sharing: block i of a request
// is served when some earlier request had the same id at block i; a partial block serves the
// tokens the earlier request had of it, in whole Pagoda blocks; a request never hits its last
// token. Requires block_size to divide the trace's block.
int64_t ceiling_from_ids(const std::vector<TraceRequest>& trace, int64_t B, int64_t bs) {
  std::map<uint64_t, int64_t> seen;  // id -> most tokens of that trace block an earlier request had
  int64_t hit = 0;
  for (const TraceRequest& r : trace) {
    int64_t h = 0;
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      const int64_t len = std::min(B, r.input_length - static_cast<int64_t>(i) * B);
      auto it = seen.find(r.hash_ids[i]);
      if (it == seen.end()) break;
      const int64_t served = std::min(it->second, len) / bs * bs;
      h += served;
      if (served < len) break;
    }
    hit += std::min(h, (r.input_length - 1) / bs * bs);
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      const int64_t len = std::min(B, r.input_length - static_cast<int64_t>(i) * B);
      int64_t& s = seen[r.hash_ids[i]];
      s = std::max(s, len);
    }
  }
  return hit;
}

TEST(CacheReplay, CeilingOfMooncakesTraceEqualsItsOwnSharing) {
  const std::string path = testing::test_data_dir() + "/traces/mooncake-synthetic.jsonl";
  ASSERT_TRUE(testing::file_exists(path)) << path << " is missing (PAGODA_TEST_DATA)";
  TraceOptions o;
  o.max_requests = 400;  // a slice: a few seconds under the sanitizers
  auto t = read_trace(path, o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t->size(), 400u);
  for (int64_t bs : {16, 512}) {
    SCOPED_TRACE("block size " + std::to_string(bs));
    CacheReplayOptions ro;
    ro.block_size = bs;
    ro.trace = o;
    auto ceiling = replay_cache(*t, ro);
    ASSERT_TRUE(ceiling.is_ok()) << ceiling.status().message();
    EXPECT_EQ(ceiling->hit_tokens, ceiling_from_ids(*t, 512, bs));
    EXPECT_GT(ceiling->hit_tokens, 0);  // the slice's sharing is still building up (5%)
    // A cache of a tenth of the blocks serves less, and never more than the ceiling.
    ro.capacity_tokens = unbounded_capacity_blocks(*t, bs) * bs / 10;
    auto small = replay_cache(*t, ro);
    ASSERT_TRUE(small.is_ok());
    EXPECT_LT(small->hit_tokens, ceiling->hit_tokens);
    EXPECT_GT(small->evictions, 0);
    EXPECT_EQ(small->peak_blocks_held, small->capacity_blocks);
  }
}

}  // namespace
}  // namespace pagoda::sim
