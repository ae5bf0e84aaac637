// Drives a WorkloadPlan against a server: closed loop (`concurrency` worker threads, each
// running the next unstarted session) or open loop (every session on a thread of its own,
// started at its planned arrival time). A session's turns run one after another; a multi-turn
// session resends the whole conversation each turn, with the assistant's streamed replies in
// it. When a turn fails, the session's later turns are recorded as failed without being sent.
// Closed loop with `interleave` (multi-turn chat as users have it: a session's next turn comes
// after the others have had theirs): sessions take turns in round-robin order, turn k of every
// session before any turn k + 1, at most `concurrency` requests in flight; without it a worker
// runs one session's turns back to back, so only `concurrency` sessions are alive at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "tools/serve_bench_client.h"
#include "tools/serve_bench_stats.h"
#include "tools/serve_bench_workload.h"

namespace pagoda::tools {

struct RunOptions {
  ClientSettings client;
  std::string model;         // "model" field; omitted when empty
  int64_t concurrency = 1;   // closed loop; unused when the plan has arrival times (rate > 0)
  bool open_loop = false;
  bool interleave = false;   // closed loop: sessions take turns (round robin) instead of running to the end
  bool ignore_eos = true;
};

// The JSON body of one request (completions for single-turn plans, chat for multi-turn).
nlohmann::json completion_body(const RunOptions& options, const std::string& prompt, int64_t max_tokens);
nlohmann::json chat_body(const RunOptions& options, const nlohmann::json& messages, int64_t max_tokens);

// One record per planned request (plan.total_requests()), in plan order (session, turn).
std::vector<RequestRecord> run_plan(const WorkloadPlan& plan, const RunOptions& options, const Clock& clock);

}  // namespace pagoda::tools
