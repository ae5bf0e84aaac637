// The workload of `pagoda bench-serve`: a deterministic plan (same options and seed -> the same
// sessions, texts, lengths and arrival times) built before anything is sent.
//
// Every workload is a list of sessions; a session is one or more turns sent one after another.
//   random         one turn each: a prompt of random words, /v1/completions
//   shared-prefix  one turn each: the same system prompt (system_prompt_len words) followed by
//                  random words, /v1/completions (prompt = system + " " + suffix)
//   multi-turn     `turns` turns each, /v1/chat/completions: the optional shared system message,
//                  then every earlier user message and assistant reply, then the new user message
//   trace          one turn per request of a trace file (Mooncake's format or token-id prompts,
//                  sim/trace.h): its prompt as token ids (synthesized per hash id, as `pagoda
//                  replay` does), max_tokens = its output_length, sent at its timestamp x
//                  time_scale (open loop), /v1/completions
// Prompts are words from a fixed list of common English words that Llama-style tokenizers keep
// as one token each, so a prompt of N words is roughly N tokens (more on tiny vocabularies).
// Arrivals: open loop (rate > 0) draws session start times from a Poisson process (exponential
// gaps, mean 1/rate); closed loop (rate == 0) leaves them 0 and `concurrency` workers start a
// session whenever one is free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda::tools {

enum class WorkloadKind { kRandom, kSharedPrefix, kMultiTurn, kTrace };

Result<WorkloadKind> parse_workload_kind(const std::string& name);
const char* workload_kind_name(WorkloadKind kind);

struct WorkloadOptions {
  WorkloadKind kind = WorkloadKind::kRandom;
  int64_t num_requests = 32;         // random / shared-prefix: sessions (one request each)
  int64_t prompt_len_min = 32, prompt_len_max = 32;  // words per prompt / user message
  int64_t output_len_min = 64, output_len_max = 64;  // max_tokens per request
  int64_t system_prompt_len = 0;     // words of the shared system prompt (shared-prefix: >= 1)
  int64_t sessions = 8;              // multi-turn
  int64_t turns = 4;                 // multi-turn
  double rate = 0;                   // requests (sessions) per second; 0: closed loop
  uint64_t seed = 1;
  // trace
  std::string trace_path;
  int64_t trace_block_tokens = 512;
  int64_t replay_block_tokens = 0;   // tokens per hash id (0: trace_block_tokens)
  int32_t vocab_size = 32000;        // synthesized token ids are below it
  double time_scale = 1.0;
  int64_t max_requests = 0;          // 0: the whole trace
};

struct PlannedTurn {
  std::string user_text;             // the prompt suffix (completions) or the user message (chat)
  int64_t max_tokens = 0;
  std::vector<int32_t> prompt_ids;   // trace: the prompt as token ids (user_text unused)
};

struct PlannedSession {
  double arrival_s = 0;              // open loop: when the first turn is sent
  std::vector<PlannedTurn> turns;    // [1] or [turns]
};

struct WorkloadPlan {
  WorkloadKind kind = WorkloadKind::kRandom;
  std::string system_prompt;         // "" when none
  std::vector<PlannedSession> sessions;
  int64_t total_requests() const;
};

Status validate(const WorkloadOptions& options);
// Requires validate(options).is_ok(); not for kTrace.
WorkloadPlan plan_workload(const WorkloadOptions& options);
// kTrace: reads the trace (errors name the file and line).
Result<WorkloadPlan> plan_trace_workload(const WorkloadOptions& options);

}  // namespace pagoda::tools
