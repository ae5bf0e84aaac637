// Which worker serves a request (the router's policy; no engine state, only what the router
// knows: each worker's block index and its own bookkeeping of what it sent there).
//
//   kv-aware     Dynamo's cost, lowest wins:
//                  cost = overlap_weight x prefill_blocks + decode_blocks
//                  prefill_blocks = (worker's pending prefill tokens + this request's tokens
//                                    not cached there) / block_size
//                  decode_blocks  = worker's active blocks + this request's blocks
//                so a long cached prefix pulls a request to its worker until that worker's
//                backlog outweighs the recompute elsewhere. overlap_weight 0 is pure load.
//   least-load   fewest requests in flight, then fewest active blocks
//   round-robin  the next available worker in turn
// Ties go to fewer requests in flight, then round-robin order (so equal workers share).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pagoda::router {

enum class RoutingPolicy { kKvAware, kRoundRobin, kLeastLoad };
std::optional<RoutingPolicy> routing_policy_from_name(std::string_view name);  // "kv-aware", ...
const char* routing_policy_name(RoutingPolicy policy);

struct WorkerLoad {
  bool available = false;            // healthy, and not tried yet for this request
  int64_t overlap_blocks = 0;        // of this request's prompt blocks, cached there (index)
  int64_t pending_prefill_tokens = 0;  // of requests sent there without a first token yet
  int64_t active_blocks = 0;         // prompt + output blocks of requests in flight there
  int64_t in_flight = 0;             // requests in flight there
};

struct RequestCost {
  int64_t prompt_tokens = 0;
  int64_t request_blocks = 0;        // ceil((prompt + max_tokens) / block_size)
  int64_t block_size = 16;
};

struct Choice {
  int worker = -1;                   // -1: none available
  double cost = 0;                   // kv-aware's cost of the choice
};

double kv_aware_cost(const WorkerLoad& load, const RequestCost& request, double overlap_weight);

// rr_cursor: a counter the caller keeps per router (advanced on every pick).
Choice choose_worker(RoutingPolicy policy, std::span<const WorkerLoad> workers, const RequestCost& request,
                     double overlap_weight, uint64_t rr_cursor);

}  // namespace pagoda::router
