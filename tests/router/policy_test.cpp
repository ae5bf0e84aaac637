// The router's placement policies, on made-up loads.
#include "router/policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagoda::router {
namespace {

WorkerLoad up(int64_t overlap = 0, int64_t pending = 0, int64_t active = 0, int64_t in_flight = 0) {
  return WorkerLoad{true, overlap, pending, active, in_flight};
}

RequestCost request(int64_t prompt_tokens, int64_t blocks) { return RequestCost{prompt_tokens, blocks, 16}; }

TEST(Policy, Names) {
  EXPECT_EQ(routing_policy_from_name("kv-aware"), RoutingPolicy::kKvAware);
  EXPECT_EQ(routing_policy_from_name("round-robin"), RoutingPolicy::kRoundRobin);
  EXPECT_EQ(routing_policy_from_name("least-load"), RoutingPolicy::kLeastLoad);
  EXPECT_FALSE(routing_policy_from_name("random").has_value());
  EXPECT_STREQ(routing_policy_name(RoutingPolicy::kKvAware), "kv-aware");
}

TEST(Policy, KvAwareGoesWhereThePrefixIs) {
  // 320-token prompt (20 blocks): worker 1 holds 15 of them.
  const std::vector<WorkerLoad> loads = {up(0), up(15), up(2)};
  for (uint64_t cursor = 0; cursor < 6; ++cursor) {
    EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, loads, request(320, 24), 1.0, cursor).worker, 1);
  }
  EXPECT_DOUBLE_EQ(kv_aware_cost(loads[1], request(320, 24), 1.0), 5.0 + 24.0);
  EXPECT_DOUBLE_EQ(kv_aware_cost(loads[0], request(320, 24), 1.0), 20.0 + 24.0);
}

TEST(Policy, KvAwareLeavesABackloggedWorker) {
  // Worker 0 caches 15 of 20 blocks but has 40 blocks of prefill pending and 100 active blocks.
  const std::vector<WorkerLoad> loads = {up(15, 40 * 16, 100, 6), up(0, 0, 10, 1)};
  EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, loads, request(320, 24), 1.0, 0).worker, 1);
  // Weight 0 is load alone.
  const std::vector<WorkerLoad> even = {up(15, 0, 12, 1), up(0, 0, 10, 1)};
  EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, even, request(320, 24), 0.0, 0).worker, 1);
  EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, even, request(320, 24), 1.0, 0).worker, 0);
}

TEST(Policy, EqualWorkersShareByTurns) {
  const std::vector<WorkerLoad> loads = {up(), up(), up()};
  std::vector<int> picks;
  for (uint64_t cursor = 0; cursor < 3; ++cursor) {
    picks.push_back(choose_worker(RoutingPolicy::kKvAware, loads, request(64, 5), 1.0, cursor).worker);
  }
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2}));
  // Cost ties break on fewer requests in flight.
  const std::vector<WorkerLoad> tie = {up(0, 0, 4, 3), up(0, 0, 4, 1)};
  EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, tie, request(64, 5), 1.0, 0).worker, 1);
}

TEST(Policy, RoundRobinAndLeastLoad) {
  std::vector<WorkerLoad> loads = {up(9, 0, 50, 4), up(0, 0, 1, 0), up(0, 0, 0, 2)};
  EXPECT_EQ(choose_worker(RoutingPolicy::kRoundRobin, loads, request(64, 5), 1.0, 0).worker, 0);
  EXPECT_EQ(choose_worker(RoutingPolicy::kRoundRobin, loads, request(64, 5), 1.0, 1).worker, 1);
  EXPECT_EQ(choose_worker(RoutingPolicy::kRoundRobin, loads, request(64, 5), 1.0, 5).worker, 2);
  EXPECT_EQ(choose_worker(RoutingPolicy::kLeastLoad, loads, request(64, 5), 1.0, 0).worker, 1);
  loads[1].in_flight = 2;
  loads[1].active_blocks = 3;
  EXPECT_EQ(choose_worker(RoutingPolicy::kLeastLoad, loads, request(64, 5), 1.0, 0).worker, 2);  // fewer blocks
}

TEST(Policy, UnavailableWorkersAreNeverChosen) {
  std::vector<WorkerLoad> loads = {up(20), up(0)};
  loads[0].available = false;  // down, or already tried for this request
  for (RoutingPolicy p : {RoutingPolicy::kKvAware, RoutingPolicy::kRoundRobin, RoutingPolicy::kLeastLoad}) {
    for (uint64_t cursor = 0; cursor < 4; ++cursor) EXPECT_EQ(choose_worker(p, loads, request(320, 24), 1.0, cursor).worker, 1);
  }
  loads[1].available = false;
  EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, loads, request(320, 24), 1.0, 0).worker, -1);
  EXPECT_EQ(choose_worker(RoutingPolicy::kKvAware, {}, request(320, 24), 1.0, 0).worker, -1);
}

}  // namespace
}  // namespace pagoda::router
