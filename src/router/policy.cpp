#include "router/policy.h"

#include <algorithm>

namespace pagoda::router {

std::optional<RoutingPolicy> routing_policy_from_name(std::string_view name) {
  if (name == "kv-aware") return RoutingPolicy::kKvAware;
  if (name == "round-robin") return RoutingPolicy::kRoundRobin;
  if (name == "least-load") return RoutingPolicy::kLeastLoad;
  return std::nullopt;
}

const char* routing_policy_name(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kKvAware: return "kv-aware";
    case RoutingPolicy::kRoundRobin: return "round-robin";
    case RoutingPolicy::kLeastLoad: return "least-load";
  }
  return "?";
}

double kv_aware_cost(const WorkerLoad& load, const RequestCost& request, double overlap_weight) {
  const double block = static_cast<double>(std::max<int64_t>(1, request.block_size));
  const int64_t uncached = std::max<int64_t>(0, request.prompt_tokens - load.overlap_blocks * request.block_size);
  const double prefill_blocks = static_cast<double>(load.pending_prefill_tokens + uncached) / block;
  const double decode_blocks = static_cast<double>(load.active_blocks + request.request_blocks);
  return overlap_weight * prefill_blocks + decode_blocks;
}

Choice choose_worker(RoutingPolicy policy, std::span<const WorkerLoad> workers, const RequestCost& request,
                     double overlap_weight, uint64_t rr_cursor) {
  const int n = static_cast<int>(workers.size());
  Choice best;
  if (n == 0) return best;
  // Visit workers in round-robin order from the cursor: the first of equals wins.
  const int start = static_cast<int>(rr_cursor % static_cast<uint64_t>(n));
  for (int k = 0; k < n; ++k) {
    const int i = (start + k) % n;
    const WorkerLoad& w = workers[i];
    if (!w.available) continue;
    if (policy == RoutingPolicy::kRoundRobin) return Choice{i, 0};
    const double cost = policy == RoutingPolicy::kKvAware ? kv_aware_cost(w, request, overlap_weight) : 0;
    if (best.worker < 0) {
      best = Choice{i, cost};
      continue;
    }
    const WorkerLoad& b = workers[best.worker];
    bool better = false;
    if (policy == RoutingPolicy::kKvAware) {
      better = cost < best.cost - 1e-9 || (cost <= best.cost + 1e-9 && w.in_flight < b.in_flight);
    } else {
      better = w.in_flight < b.in_flight || (w.in_flight == b.in_flight && w.active_blocks < b.active_blocks);
    }
    if (better) best = Choice{i, cost};
  }
  return best;
}

}  // namespace pagoda::router
