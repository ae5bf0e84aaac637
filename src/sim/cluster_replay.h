// Cluster mode of trace replay (`pagoda replay --instances N`): a trace's requests arrive at
// their timestamps (x time_scale) at a router that places each on one of N colocated instances
// with the router's own policy code (router/policy.h: kv-aware, least-load, round-robin). Each
// instance is Pagoda's real Scheduler (continuous batching, chunked prefill, admission with
// prefix-cache matching, preemption) over its real BlockManager (a pool of capacity_tokens
// without KV memory). Time is simulated and event-driven: a step of an instance takes
//
//   step_s = prefill_tokens / prefill_tps
//          + (decoding sequences > 0 ? (1 + (decoding - 1) x decode_batch_cost) / decode_tps : 0)
//
// (a profile given per run: measured with `pagoda bench` on this machine, or a GPU's numbers),
// and the next event is the earliest of the next arrival and the instances' step ends.
// Generated tokens are synthesized (unique per request); a request ends after output_length
// tokens (at least 1).
//
// Global pool (global_pool_tokens > 0, sim/shared_pool.h): one shared tier below every
// instance's pool, with a Redis tier's semantics: each instance's TierStack writes every
// committed block through to it, and its scheduler probes it at admission and loads what it
// holds (the real tier path; no cost model: what is found is loaded). The pools then hold KV
// memory of a stand-in geometry (128 bytes a block at block 16) so that records are real. A
// load adds loaded tokens x kv_bytes_per_token / global_pool_gbps to the step that admits it
// (0: free).
//
// P/D split (prefill_instances P > 0, decode_instances D > 0; `instances` is then ignored):
// requests are routed by the policy among the P prefill instances, which run each prompt to its
// first token (TTFT ends there) and keep its blocks cached; a request with more tokens to
// generate is then handed to the least-loaded decode instance (the router's least-load code
// over the D decode instances). The decode instance matches its own prefix cache first, so only
// the prompt tokens it lacks move: (prompt - decode-side hit) x kv_bytes_per_token bytes at
// transfer_gbps (0: free). When they arrive the decode instance builds the sequence's KV
// (BlockManager: adopt the hit, append and commit the rest) and its scheduler takes it as
// adopted KV (Scheduler::add with adopt, as Pagoda's P/D decode side does), decoding the rest;
// the first gap between tokens includes the transfer. A transfer whose blocks do not fit waits
// on its decode instance until they do, and is refused if they cannot fit even with nothing
// running there. Hit rate is the prefill side's.
//
// What the router knows (RequestCost, WorkerLoad): an instance's overlap is what its block
// manager would match now (BlockManager::plan: the index a router builds from KV events, with
// no event lag); its pending prefill tokens and active blocks are the router's own bookkeeping
// of what it sent there, as router/worker.h keeps it. Deterministic: no randomness, no wall
// clock.
//
// Reported per request: TTFT (first token - arrival), TBT (gaps between its tokens); per run:
// their p50/p90/p99, hit rate (prompt tokens served by the prefix cache at each request's first
// admission / prompt tokens), SLO attainment (requests whose TTFT <= ttft_slo and mean TBT <=
// tbt_slo), requests the scheduler refused, and per instance the requests, hit rate and busy
// time (load balance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kvcache/eviction.h"
#include "router/policy.h"
#include "sim/trace.h"

namespace pagoda::sim {

struct StepCostProfile {
  double prefill_tps = 5000;       // prompt tokens per second in a step
  double decode_tps = 50;          // one decoding sequence's tokens per second
  double decode_batch_cost = 0.05; // each further decoding sequence adds this share of a decode step
  double step_seconds(int64_t prefill_tokens, int64_t decoding) const;
};

struct ClusterReplayOptions {
  int instances = 1;
  int64_t capacity_tokens = 0;     // per instance, required
  int64_t block_size = 16;
  kvcache::EvictionPolicyKind eviction = kvcache::EvictionPolicyKind::kLru;
  router::RoutingPolicy policy = router::RoutingPolicy::kKvAware;
  double overlap_weight = 1.0;     // kv-aware: the router's --overlap-weight
  double time_scale = 1.0;         // arrival times x this (< 1: faster arrivals)
  int64_t max_num_seqs = 64;       // per instance, the scheduler's
  int64_t max_num_batched_tokens = 2048;
  // The serving engine's latency budget (`serve --step-budget-ms`, default 100): while any
  // sequence decodes, a step takes the tokens its StepCostModel (engine/step_cost.h) says fit,
  // the model fed with each simulated step as the serving loop feeds it real ones. 0: off.
  double step_budget_ms = 0;
  StepCostProfile cost;
  double ttft_slo_s = 0;           // 0: no SLO
  double tbt_slo_s = 0;
  int64_t global_pool_tokens = 0;  // 0: local caches only
  double global_pool_gbps = 0;     // load bandwidth from it (0: loads take no time)
  int64_t kv_bytes_per_token = 0;  // of the model being simulated (for load and transfer times)
  int prefill_instances = 0;       // > 0 with decode_instances: a P/D split (see the top)
  int decode_instances = 0;
  double transfer_gbps = 0;        // P/D: prefill -> decode KV bandwidth (0: transfers take no time)
  TraceOptions trace;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct InstanceReplayStats {
  bool decode = false;             // P/D: a decode instance (else prefill, or colocated)
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;
  double busy_s = 0;               // simulated time spent in steps
  int64_t steps = 0;
  int64_t preemptions = 0;
};

struct ClusterReplayResult {
  int64_t requests = 0;
  int64_t finished = 0;
  int64_t rejected = 0;            // refused by a scheduler: can never fit its pool
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;          // served at first admission: local pool + global pool
  int64_t global_hit_tokens = 0;   // of which loaded from the global pool
  double hit_rate = 0;
  Percentiles ttft_s, tbt_s;
  double slo_attainment = 0;       // of finished requests; 1 with no SLO given
  double makespan_s = 0;           // simulated: last token - first arrival
  int64_t transfers = 0;           // P/D: requests handed to a decode instance
  int64_t transfer_bytes = 0;      // P/D: KV bytes moved (prompt tokens the decode side lacked)
  int64_t decode_hit_tokens = 0;   // P/D: prompt tokens the decode side already held (not moved)
  std::vector<InstanceReplayStats> per_instance;
};

Result<ClusterReplayResult> replay_cluster(const std::vector<TraceRequest>& trace, const ClusterReplayOptions& options);

}  // namespace pagoda::sim
