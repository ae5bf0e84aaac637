// Drives a WorkloadPlan against a server: closed loop (`concurrency` worker threads, each
// running the next unstarted session) or open loop (every session on a thread of its own,
// started at its planned arrival time). A session's turns run one after another; a multi-turn
// session resends the whole conversation each turn, with the assistant's streamed replies in
// it. When a turn fails, the session's later turns are recorded as failed without being sent.
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
  bool ignore_eos = true;
};

// The JSON body of one request (completions for single-turn plans, chat for multi-turn).
nlohmann::json completion_body(const RunOptions& options, const std::string& prompt, int64_t max_tokens);
nlohmann::json chat_body(const RunOptions& options, const nlohmann::json& messages, int64_t max_tokens);

// One record per planned request (plan.total_requests()), in plan order (session, turn).
std::vector<RequestRecord> run_plan(const WorkloadPlan& plan, const RunOptions& options, const Clock& clock);

}  // namespace pagoda::tools
