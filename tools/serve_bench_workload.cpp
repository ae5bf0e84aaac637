#include "tools/serve_bench_workload.h"

#include <array>
#include <cmath>

#include "core/check.h"
#include "core/rng.h"
#include "sim/trace.h"

namespace pagoda::tools {

namespace {

// Common words that SentencePiece Llama vocabularies hold as single "▁word" tokens.
constexpr std::array<const char*, 96> kWords = {
    "the", "time", "people", "way", "day", "man", "thing", "woman", "life", "child",
    "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
    "place", "case", "week", "company", "system", "program", "question", "work", "government", "number",
    "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact",
    "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue",
    "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game",
    "line", "end", "member", "law", "car", "city", "name", "team", "minute", "idea",
    "kid", "body", "back", "parent", "face", "others", "level", "office", "door", "health",
    "person", "art", "war", "history", "party", "result", "change", "morning", "reason", "research",
    "girl", "guy", "moment", "air", "teacher", "force"};

std::string random_words(Rng& rng, int64_t count) {
  std::string text;
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) text += ' ';
    text += kWords[rng.next_u64() % kWords.size()];
  }
  return text;
}

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {  // inclusive
  return lo + static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

Result<WorkloadKind> parse_workload_kind(const std::string& name) {
  if (name == "random") return WorkloadKind::kRandom;
  if (name == "shared-prefix") return WorkloadKind::kSharedPrefix;
  if (name == "multi-turn") return WorkloadKind::kMultiTurn;
  if (name == "trace") return WorkloadKind::kTrace;
  return Status::invalid_argument("--workload must be random, shared-prefix, multi-turn or trace, got '" + name + "'");
}

const char* workload_kind_name(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kRandom: return "random";
    case WorkloadKind::kSharedPrefix: return "shared-prefix";
    case WorkloadKind::kMultiTurn: return "multi-turn";
    case WorkloadKind::kTrace: return "trace";
  }
  return "?";
}

int64_t WorkloadPlan::total_requests() const {
  int64_t n = 0;
  for (const PlannedSession& s : sessions) n += static_cast<int64_t>(s.turns.size());
  return n;
}

Status validate(const WorkloadOptions& o) {
  auto range = [](const char* name, int64_t lo, int64_t hi) -> Status {
    if (lo < 1 || hi < lo) {
      return Status::invalid_argument(std::string("--") + name + " must be N or MIN:MAX with 1 <= MIN <= MAX, got " +
                                      std::to_string(lo) + ":" + std::to_string(hi));
    }
    return Status::ok();
  };
  PAGODA_RETURN_IF_ERROR(range("prompt-len", o.prompt_len_min, o.prompt_len_max));
  PAGODA_RETURN_IF_ERROR(range("output-len", o.output_len_min, o.output_len_max));
  if (o.system_prompt_len < 0) return Status::invalid_argument("--system-prompt-len must be >= 0");
  if (o.kind == WorkloadKind::kSharedPrefix && o.system_prompt_len < 1) {
    return Status::invalid_argument("--workload shared-prefix needs --system-prompt-len >= 1");
  }
  if (o.kind == WorkloadKind::kMultiTurn) {
    if (o.sessions < 1) return Status::invalid_argument("--sessions must be >= 1");
    if (o.turns < 1) return Status::invalid_argument("--turns must be >= 1");
  } else if (o.num_requests < 1) {
    return Status::invalid_argument("--num-requests must be >= 1");
  }
  if (!(o.rate >= 0) || !std::isfinite(o.rate)) return Status::invalid_argument("--rate must be a finite number >= 0");
  return Status::ok();
}

WorkloadPlan plan_workload(const WorkloadOptions& o) {
  CHECK(validate(o).is_ok());
  // Separate streams, so that changing the rate does not change the texts and vice versa.
  Rng text_rng(o.seed);
  Rng arrival_rng(o.seed ^ 0xa5a5a5a5a5a5a5a5ull);
  WorkloadPlan plan;
  plan.kind = o.kind;
  if (o.system_prompt_len > 0) plan.system_prompt = random_words(text_rng, o.system_prompt_len);
  const bool multi = o.kind == WorkloadKind::kMultiTurn;
  const int64_t n_sessions = multi ? o.sessions : o.num_requests;
  const int64_t n_turns = multi ? o.turns : 1;
  double t = 0;
  plan.sessions.resize(static_cast<size_t>(n_sessions));
  for (PlannedSession& session : plan.sessions) {
    if (o.rate > 0) {
      // Exponential gap; 1 - u is in (0, 1], so the log is finite.
      t += -std::log(1.0 - arrival_rng.uniform()) / o.rate;
      session.arrival_s = t;
    }
    for (int64_t i = 0; i < n_turns; ++i) {
      PlannedTurn turn;
      turn.user_text = random_words(text_rng, uniform_int(text_rng, o.prompt_len_min, o.prompt_len_max));
      turn.max_tokens = uniform_int(text_rng, o.output_len_min, o.output_len_max);
      session.turns.push_back(std::move(turn));
    }
  }
  return plan;
}

}  // namespace pagoda::tools

namespace pagoda::tools {

Result<WorkloadPlan> plan_trace_workload(const WorkloadOptions& o) {
  if (o.trace_path.empty()) return Status::invalid_argument("--workload trace needs --trace FILE");
  if (!(o.time_scale > 0)) return Status::invalid_argument("--time-scale must be > 0");
  sim::TraceOptions t;
  t.block_tokens = o.trace_block_tokens;
  t.replay_block_tokens = o.replay_block_tokens;
  t.vocab_size = o.vocab_size;
  t.max_requests = o.max_requests;
  PAGODA_ASSIGN_OR_RETURN(std::vector<sim::TraceRequest> trace, sim::read_trace(o.trace_path, t));
  WorkloadPlan plan;
  plan.kind = WorkloadKind::kTrace;
  const double t0 = trace.front().timestamp_ms;
  for (const sim::TraceRequest& r : trace) {
    PlannedSession session;
    session.arrival_s = (r.timestamp_ms - t0) * 1e-3 * o.time_scale;
    PlannedTurn turn;
    turn.max_tokens = std::max<int64_t>(1, r.output_length);
    sim::synthesize_prompt(r, t, turn.prompt_ids);
    session.turns.push_back(std::move(turn));
    plan.sessions.push_back(std::move(session));
  }
  return plan;
}

}  // namespace pagoda::tools
