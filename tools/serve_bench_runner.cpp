#include "tools/serve_bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
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

// One session's conversation so far: the next turn to send and the messages sent and received.
struct SessionState {
  json messages = json::array();
  size_t next = 0;      // index of the next turn
  bool failed = false;  // an earlier turn failed: the rest are recorded as not sent
};

SessionState start_session(const WorkloadPlan& plan) {
  SessionState state;
  if (plan.kind == WorkloadKind::kMultiTurn && !plan.system_prompt.empty()) {
    state.messages.push_back({{"role", "system"}, {"content", plan.system_prompt}});
  }
  return state;
}

// Sends the session's next turn (state.next) and writes its record, records[state.next].
void run_turn(const WorkloadPlan& plan, const PlannedSession& session, const RunOptions& options, const Clock& clock,
              double t0_s, SessionState& state, RequestRecord* records) {
  const PlannedTurn& turn = session.turns[state.next];
  RequestRecord& record = records[state.next];
  ++state.next;
  if (state.failed) {
    record.error = "not sent: an earlier turn of its session failed";
    record.send_s = record.end_s = clock.now_seconds() - t0_s;
    return;
  }
  std::string reply;
  if (plan.kind == WorkloadKind::kMultiTurn) {
    state.messages.push_back({{"role", "user"}, {"content", turn.user_text}});
    record = send_streaming(options.client, "/v1/chat/completions", chat_body(options, state.messages, turn.max_tokens),
                            clock, t0_s, &reply);
    state.messages.push_back({{"role", "assistant"}, {"content", reply}});
  } else if (!turn.prompt_ids.empty()) {  // a trace's token ids
    json body = completion_body(options, "", turn.max_tokens);
    body["prompt"] = turn.prompt_ids;
    record = send_streaming(options.client, "/v1/completions", body, clock, t0_s, &reply);
  } else {
    const std::string prompt = plan.system_prompt.empty() ? turn.user_text : plan.system_prompt + " " + turn.user_text;
    record = send_streaming(options.client, "/v1/completions", completion_body(options, prompt, turn.max_tokens),
                            clock, t0_s, &reply);
  }
  state.failed = !record.ok;
}

// Runs one session's turns back to back; writes records[0 .. turns).
void run_session(const WorkloadPlan& plan, const PlannedSession& session, const RunOptions& options,
                 const Clock& clock, double t0_s, RequestRecord* records) {
  SessionState state = start_session(plan);
  while (state.next < session.turns.size()) run_turn(plan, session, options, clock, t0_s, state, records);
}

// Closed loop, interleaved: `workers` threads take the next ready session from a FIFO (all
// sessions in plan order at first), send its next turn, and put it back at the end while it
// has turns left: turn k of every session is taken before any session's turn k + 1.
void run_interleaved(const WorkloadPlan& plan, const RunOptions& options, const Clock& clock, double t0_s,
                     const std::vector<size_t>& first_record, std::vector<RequestRecord>& records) {
  std::vector<SessionState> states;
  std::deque<size_t> ready;
  size_t unfinished = 0;
  for (size_t i = 0; i < plan.sessions.size(); ++i) {
    states.push_back(start_session(plan));
    if (plan.sessions[i].turns.empty()) continue;
    ready.push_back(i);
    ++unfinished;
  }
  std::mutex mutex;
  std::condition_variable changed;
  auto work = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return !ready.empty() || unfinished == 0; });
      if (ready.empty()) return;
      const size_t i = ready.front();
      ready.pop_front();
      lock.unlock();  // a session is owned by one worker at a time: its state needs no lock
      run_turn(plan, plan.sessions[i], options, clock, t0_s, states[i], records.data() + first_record[i]);
      lock.lock();
      if (states[i].next < plan.sessions[i].turns.size()) {
        ready.push_back(i);
      } else {
        --unfinished;
      }
      changed.notify_all();
    }
  };
  std::vector<std::thread> threads;
  const auto workers = static_cast<size_t>(std::max<int64_t>(1, options.concurrency));
  for (size_t w = 0; w < std::min(workers, plan.sessions.size()); ++w) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
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
  } else if (options.interleave) {
    run_interleaved(plan, options, clock, t0_s, first_record, records);
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
