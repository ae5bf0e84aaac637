// Cluster mode (sim/cluster_replay.h): the real scheduler and block manager per instance, the
// router's policy, a simulated clock. Exact times on a hand-made trace, then the invariants and
// determinism on a slice of Mooncake's trace.
#include <gtest/gtest.h>

#include "sim/cluster_replay.h"
#include "test_data.h"

namespace pagoda::sim {
namespace {

std::string line(double ts, int64_t in, int64_t out, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " + std::to_string(in) +
         ", \"output_length\": " + std::to_string(out) + ", \"hash_ids\": [" + ids + "]}\n";
}

ClusterReplayOptions small(router::RoutingPolicy policy) {
  ClusterReplayOptions o;
  o.instances = 2;
  o.capacity_tokens = 64;
  o.block_size = 4;
  o.policy = policy;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 64;
  o.cost = StepCostProfile{1000, 50, 0.5};
  o.trace.block_tokens = 4;
  return o;
}

// A [1,2] (8 tokens, 2 outputs) at 0 s; B [1,2,3] (12 tokens, 1 output) at 10 s.
//   A: prefill 8 tokens = 8 ms -> first token at 0.008; one decode step = 1/50 s -> 0.028.
//   B, kv-aware: A's instance holds blocks 1, 2 (8 tokens): prefill of 4 tokens, TTFT 4 ms.
//   B, round-robin: the other instance, nothing cached: prefill of 12 tokens, TTFT 12 ms.
TEST(ClusterReplay, ExactTimesAndWhereTheRouterSendsAPrefix) {
  TraceOptions to;
  to.block_tokens = 4;
  auto t = parse_trace(line(0, 8, 2, "1, 2") + line(10000, 12, 1, "1, 2, 3"), to);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto kv = replay_cluster(*t, small(router::RoutingPolicy::kKvAware));
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  EXPECT_EQ(kv->requests, 2);
  EXPECT_EQ(kv->finished, 2);
  EXPECT_EQ(kv->rejected, 0);
  EXPECT_EQ(kv->hit_tokens, 8);
  EXPECT_EQ(kv->per_instance[0].requests, 2);
  EXPECT_NEAR(kv->ttft_s.p50, 0.004, 1e-12);  // nearest rank of {0.004, 0.008}
  EXPECT_NEAR(kv->ttft_s.p99, 0.008, 1e-12);
  EXPECT_NEAR(kv->tbt_s.p50, 0.02, 1e-12);     // A's one gap
  EXPECT_NEAR(kv->makespan_s, 10.004, 1e-9);
  EXPECT_EQ(kv->slo_attainment, 1.0);

  auto rr = replay_cluster(*t, small(router::RoutingPolicy::kRoundRobin));
  ASSERT_TRUE(rr.is_ok()) << rr.status().message();
  EXPECT_EQ(rr->hit_tokens, 0);
  EXPECT_EQ(rr->per_instance[0].requests, 1);
  EXPECT_EQ(rr->per_instance[1].requests, 1);
  EXPECT_NEAR(rr->ttft_s.p99, 0.012, 1e-12);

  ClusterReplayOptions slo = small(router::RoutingPolicy::kRoundRobin);
  slo.ttft_slo_s = 0.010;  // A meets it (8 ms), B does not (12 ms)
  auto s = replay_cluster(*t, slo);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->slo_attainment, 0.5);

  ClusterReplayOptions bad = small(router::RoutingPolicy::kKvAware);
  bad.capacity_tokens = 3;
  EXPECT_FALSE(replay_cluster(*t, bad).is_ok());
  bad = small(router::RoutingPolicy::kKvAware);
  bad.cost.prefill_tps = 0;
  EXPECT_FALSE(replay_cluster(*t, bad).is_ok());
}

// The same two requests, round-robin, with a global pool below both instances: B, on the other
// instance, loads A's two blocks from it (write-through at A's commit) through its scheduler's
// tier path: 8 tokens hit, all global; its step pays 8 tokens x 1000 B at 1 MB/s = 8 ms on top
// of the 4-token prefill (4 ms): TTFT 12 ms.
TEST(ClusterReplay, AGlobalPoolServesAnotherInstancesPrefix) {
  TraceOptions to;
  to.block_tokens = 4;
  auto t = parse_trace(line(0, 8, 2, "1, 2") + line(10000, 12, 1, "1, 2, 3"), to);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ClusterReplayOptions o = small(router::RoutingPolicy::kRoundRobin);
  o.global_pool_tokens = 64;
  o.global_pool_gbps = 0.001;
  o.kv_bytes_per_token = 1000;
  auto r = replay_cluster(*t, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->per_instance[1].requests, 1);
  EXPECT_EQ(r->hit_tokens, 8);
  EXPECT_EQ(r->global_hit_tokens, 8);
  EXPECT_EQ(r->finished, 2);
  EXPECT_NEAR(r->ttft_s.p99, 0.012, 1e-12);
  o.global_pool_tokens = 2;  // less than a block
  EXPECT_FALSE(replay_cluster(*t, o).is_ok());
}

// A prompt larger than an instance's whole pool is refused by its scheduler, not stranded.
TEST(ClusterReplay, APromptLargerThanThePoolIsRefused) {
  TraceOptions to;
  to.block_tokens = 4;
  auto t = parse_trace(line(0, 100, 1, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, "
                                        "23, 24, 25") + line(1, 8, 1, "30, 31"), to);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto r = replay_cluster(*t, small(router::RoutingPolicy::kRoundRobin));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->rejected, 1);
  EXPECT_EQ(r->finished, 1);
}

// The first n requests of Mooncake's trace, and options for them: 1M tokens of cache per
// instance, blocks of 512, a fast prefill profile.
Result<std::vector<TraceRequest>> mooncake_slice(int64_t n, ClusterReplayOptions& o) {
  const std::string path = testing::test_data_dir() + "/traces/mooncake-synthetic.jsonl";
  if (!testing::file_exists(path)) return Status::not_found(path + " is missing (PAGODA_TEST_DATA)");
  o.trace.max_requests = n;
  o.capacity_tokens = 1000000;
  o.block_size = 512;
  o.cost = StepCostProfile{20000, 40, 0.05};
  return read_trace(path, o.trace);
}

TEST(ClusterReplay, MooncakeSliceKvAwareRoutingBeatsRoundRobinAndIsDeterministic) {
  ClusterReplayOptions o;
  auto t = mooncake_slice(300, o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  o.instances = 4;
  o.policy = router::RoutingPolicy::kKvAware;
  auto kv = replay_cluster(*t, o);
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  auto again = replay_cluster(*t, o);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(kv->hit_tokens, again->hit_tokens);
  EXPECT_EQ(kv->ttft_s.p99, again->ttft_s.p99);
  EXPECT_EQ(kv->tbt_s.p50, again->tbt_s.p50);
  o.policy = router::RoutingPolicy::kRoundRobin;
  auto rr = replay_cluster(*t, o);
  ASSERT_TRUE(rr.is_ok());
  for (const auto* r : {&kv.value(), &rr.value()}) {
    EXPECT_EQ(r->requests, 300);
    EXPECT_EQ(r->finished + r->rejected, 300);
    int64_t sum = 0, hits = 0;
    for (const InstanceReplayStats& i : r->per_instance) sum += i.requests, hits += i.hit_tokens;
    EXPECT_EQ(sum, 300);
    EXPECT_EQ(hits, r->hit_tokens);
    EXPECT_LE(r->ttft_s.p50, r->ttft_s.p90);
    EXPECT_LE(r->ttft_s.p90, r->ttft_s.p99);
  }
  EXPECT_GT(kv->hit_tokens, rr->hit_tokens);
}

// P/D split, 1 prefill + 1 decode instance, 1 MB of KV a token over 1 GB/s (1 ms a token).
//   A [1,2] (8 tokens, 3 outputs) at 0 s: prefill 8 ms -> first token 0.008; its 8 tokens move
//     in 8 ms -> decode steps of 20 ms: tokens at 0.036 and 0.056.
//   B [1,2,3] (12 tokens, 2 outputs) at 10 s: the prefill instance holds [1,2] (4 tokens, 4 ms,
//     first token 10.004); so does the decode instance (A's adopted blocks): only 4 tokens move
//     (4 ms), one decode step -> 10.028.
TEST(ClusterReplay, PdSplitMovesOnlyWhatTheDecodeSideLacks) {
  TraceOptions to;
  to.block_tokens = 4;
  auto t = parse_trace(line(0, 8, 3, "1, 2") + line(10000, 12, 2, "1, 2, 3"), to);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ClusterReplayOptions o = small(router::RoutingPolicy::kKvAware);
  o.prefill_instances = 1;
  o.decode_instances = 1;
  o.kv_bytes_per_token = 1000000;
  o.transfer_gbps = 1;
  auto r = replay_cluster(*t, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->finished, 2);
  EXPECT_EQ(r->rejected, 0);
  EXPECT_EQ(r->transfers, 2);
  EXPECT_EQ(r->decode_hit_tokens, 8);
  EXPECT_EQ(r->transfer_bytes, 12 * 1000000);
  EXPECT_EQ(r->hit_tokens, 8);  // the prefill side's
  ASSERT_EQ(r->per_instance.size(), 2u);
  EXPECT_FALSE(r->per_instance[0].decode);
  EXPECT_TRUE(r->per_instance[1].decode);
  EXPECT_EQ(r->per_instance[0].requests, 2);
  EXPECT_EQ(r->per_instance[1].requests, 2);
  EXPECT_NEAR(r->ttft_s.p50, 0.004, 1e-12);
  EXPECT_NEAR(r->ttft_s.p99, 0.008, 1e-12);
  EXPECT_NEAR(r->tbt_s.p50, 0.024, 1e-9);  // gaps {0.020, 0.024, 0.028}
  EXPECT_NEAR(r->tbt_s.p99, 0.028, 1e-9);
  EXPECT_NEAR(r->makespan_s, 10.028, 1e-9);
  // A free link: the first gap is one decode step.
  o.transfer_gbps = 0;
  auto free_link = replay_cluster(*t, o);
  ASSERT_TRUE(free_link.is_ok());
  EXPECT_NEAR(free_link->tbt_s.p99, 0.020, 1e-9);
  // One output: nothing to hand off.
  auto one = parse_trace(line(0, 8, 1, "1, 2"), to);
  ASSERT_TRUE(one.is_ok());
  auto r1 = replay_cluster(*one, o);
  ASSERT_TRUE(r1.is_ok());
  EXPECT_EQ(r1->transfers, 0);
  EXPECT_EQ(r1->finished, 1);
  o.decode_instances = 0;
  EXPECT_FALSE(replay_cluster(*t, o).is_ok());
}

TEST(ClusterReplay, PdSplitOnAMooncakeSlice) {
  ClusterReplayOptions o;
  auto t = mooncake_slice(200, o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  o.prefill_instances = 3;
  o.decode_instances = 2;
  o.kv_bytes_per_token = 1000;
  o.transfer_gbps = 10;
  auto r = replay_cluster(*t, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto again = replay_cluster(*t, o);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(r->transfer_bytes, again->transfer_bytes);
  EXPECT_EQ(r->tbt_s.p99, again->tbt_s.p99);
  EXPECT_EQ(r->requests, 200);
  EXPECT_EQ(r->finished + r->rejected, 200);
  int64_t multi = 0, prompt_multi = 0;
  for (const TraceRequest& q : *t) {
    if (q.output_length > 1) ++multi, prompt_multi += q.input_length;
  }
  EXPECT_EQ(r->transfers, multi);
  EXPECT_EQ(r->transfer_bytes, (prompt_multi - r->decode_hit_tokens) * 1000);
  int64_t prefill_requests = 0, decode_requests = 0;
  for (const InstanceReplayStats& i : r->per_instance) (i.decode ? decode_requests : prefill_requests) += i.requests;
  EXPECT_EQ(prefill_requests, 200);
  EXPECT_EQ(decode_requests, multi);
  EXPECT_GT(r->hit_rate, 0.0);
}

}  // namespace
}  // namespace pagoda::sim
