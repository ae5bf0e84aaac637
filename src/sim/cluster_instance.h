// The pieces of cluster mode (cluster_replay.h) its colocated and P/D-split runs share: a
// request's replay state, an instance (the real Scheduler over a real BlockManager, with the
// router's bookkeeping of it), percentiles and generated tokens. Internal to sim/.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/scheduler.h"
#include "engine/step_cost.h"
#include "kvcache/block_manager.h"
#include "kvcache/block_pool.h"
#include "kvcache/tier_stack.h"
#include "sim/cluster_replay.h"

namespace pagoda::sim::detail {

inline constexpr double kNever = std::numeric_limits<double>::infinity();

struct Request {
  double arrival_s = 0;
  int64_t prompt = 0;
  int64_t outputs = 1;            // tokens to generate (>= 1)
  int64_t blocks = 0;             // ceil((prompt + outputs) / block_size): the router's active blocks
  int64_t pending_prefill = 0;    // the router's: prompt tokens not cached at the chosen instance
  int instance = -1;
  engine::SchedSeqId id = -1;
  int64_t generated = 0;
  double first_token_s = -1, last_token_s = 0, tbt_sum_s = 0;
  bool hit_recorded = false;
  bool done = false;
  std::vector<int32_t> handoff;   // P/D: the prompt's tokens from hand-off to adoption, then empty
};

struct Instance {
  // global: the shared pool's client for this instance (nullptr: local cache only).
  Instance(kvcache::BlockPool p, kvcache::EvictionPolicyKind eviction, engine::SchedulerOptions o,
           std::unique_ptr<kvcache::Tier> global, const Clock& clock, const Logger& logger, const StepCostProfile& cost)
      : step_cost(1e9 / cost.decode_tps, 1e9 / cost.prefill_tps),  // a decode step's time; per token, prefill's
        pool(std::move(p)),
        bm(pool, kvcache::BlockManagerOptions{eviction}),
        stack(global != nullptr ? std::make_unique<kvcache::TierStack>(pool, kvcache::OffloadMode::kWriteBack, clock, logger)
                                : nullptr),
        sched(bm, with_tiers(o, stack.get(), &step_cost)) {
    if (stack != nullptr) {
      stack->add_tier(std::move(global), /*write_through=*/true);
      bm.add_listener(stack.get());
    }
  }
  ~Instance() {
    if (stack != nullptr) bm.remove_listener(stack.get());  // before the scheduler frees its sequences
  }
  static engine::SchedulerOptions with_tiers(engine::SchedulerOptions o, kvcache::TierStack* tiers,
                                             const engine::StepCostModel* cost) {
    o.tiers = tiers;
    if (o.step_budget_ns > 0) o.step_cost = cost;
    return o;
  }
  engine::StepCostModel step_cost;  // fed with every simulated step, as the serving loop feeds it
  kvcache::BlockPool pool;
  kvcache::BlockManager bm;
  std::unique_ptr<kvcache::TierStack> stack;
  engine::Scheduler sched;
  std::unordered_map<engine::SchedSeqId, int64_t> request_of;  // scheduler id -> request index
  std::vector<engine::ScheduledSeq> step;  // the step in flight
  bool busy = false;
  double busy_until = kNever;
  router::WorkerLoad load;                 // the router's bookkeeping (available, overlap set per pick)
  InstanceReplayStats stats;
  std::vector<int64_t> slots;
  std::vector<kvcache::BlockCopy> copies;
  std::vector<int64_t> arrived;            // P/D decode: requests whose KV arrived, not yet adopted
};

// Nearest-rank p50/p90/p99 and the mean (sorts xs).
Percentiles percentiles(std::vector<double>& xs);
// A generated token of request r at position k (splitmix64's finalizer, as trace.cpp's).
int32_t generated_token(int64_t r, int64_t k, int32_t vocab);

}  // namespace pagoda::sim::detail
