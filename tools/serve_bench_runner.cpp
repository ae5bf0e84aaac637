#include "tools/serve_bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace pagoda::tools {

using nlohmann::json;

namespace {

json common_fields(const RunOptions& options, int64_t max_tokens) {
  json body;
  if (!options.model.empty()) body["model"] = options.model;
  body["max_tokens"] = max_tokens;
  body["temperature"] = 0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  return body;
}

// Runs one session's turns; writes records[first .. first + turns).
void run_session(const WorkloadPlan& plan, const PlannedSession& session, const RunOptions& options,
                 const Clock& clock, double t0_s, RequestRecord* records) {
  const bool chat = plan.kind == WorkloadKind::kMultiTurn;
  json messages = json::array();
  if (chat && !plan.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", plan.system_prompt}});
  bool failed = false;
  for (size_t i = 0; i < session.turns.size(); ++i) {
    const PlannedTurn& turn = session.turns[i];
    RequestRecord& record = records[i];
    if (failed) {
      record.error = "not sent: an earlier turn of its session failed";
      record.send_s = record.end_s = clock.now_seconds() - t0_s;
      continue;
    }
    std::string reply;
    if (chat) {
      messages.push_back({{"role", "user"}, {"content", turn.user_text}});
      record = send_streaming(options.client, "/v1/chat/completions", chat_body(options, messages, turn.max_tokens),
                              clock, t0_s, &reply);
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    } else {
      const std::string prompt =
          plan.system_prompt.empty() ? turn.user_text : plan.system_prompt + " " + turn.user_text;
      record = send_streaming(options.client, "/v1/completions", completion_body(options, prompt, turn.max_tokens),
                              clock, t0_s, &reply);
    }
    failed = !record.ok;
  }
}

}  // namespace

json completion_body(const RunOptions& options, const std::string& prompt, int64_t max_tokens) {
  json body = common_fields(options, max_tokens);
  body["prompt"] = prompt;
  return body;
}

json chat_body(const RunOptions& options, const json& messages, int64_t max_tokens) {
  json body = common_fields(options, max_tokens);
  body["messages"] = messages;
  return body;
}

std::vector<RequestRecord> run_plan(const WorkloadPlan& plan, const RunOptions& options, const Clock& clock) {
  std::vector<RequestRecord> records(static_cast<size_t>(plan.total_requests()));
  std::vector<size_t> first_record;  // per session: index of its first turn's record
  size_t next = 0;
  for (const PlannedSession& s : plan.sessions) {
    first_record.push_back(next);
    next += s.turns.size();
  }
  const double t0_s = clock.now_seconds();
  auto run = [&](size_t session) {
    run_session(plan, plan.sessions[session], options, clock, t0_s, records.data() + first_record[session]);
  };

  std::vector<std::thread> threads;
  if (options.open_loop) {
    for (size_t i = 0; i < plan.sessions.size(); ++i) {
      const double wait_s = plan.sessions[i].arrival_s - (clock.now_seconds() - t0_s);
      if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
      threads.emplace_back(run, i);
    }
  } else {
    std::atomic<size_t> next_session{0};
    const auto workers = static_cast<size_t>(std::max<int64_t>(1, options.concurrency));
    for (size_t w = 0; w < std::min(workers, plan.sessions.size()); ++w) {
      threads.emplace_back([&] {
        for (size_t i = next_session++; i < plan.sessions.size(); i = next_session++) run(i);
      });
    }
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
  for (std::thread& t : threads) t.join();
  return records;
}

}  // namespace pagoda::tools
