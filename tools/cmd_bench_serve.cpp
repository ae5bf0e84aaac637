// pagoda bench-serve: a load generator for OpenAI-compatible servers (Pagoda's own `pagoda
// serve`, or llama.cpp through bench/peer/llama_server.mjs). It plans a seeded workload
// (tools/serve_bench_workload.h), sends it over HTTP with streaming (serve_bench_runner.h,
// serve_bench_client.h) and reports one table, or JSON with --json (serve_bench_stats.h).
// --dry-run prints the plan as JSON and sends nothing.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/commands.h"
#include "tools/serve_bench_runner.h"

namespace pagoda::tools {

namespace {

using nlohmann::json;

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string model;
  std::string workload = "random";
  std::string prompt_len = "32", output_len = "64";
  int64_t num_requests = 32;
  int64_t concurrency = 1;
  double rate = 0;
  int64_t system_prompt_len = 0;
  int64_t turns = 4, sessions = 8;
  uint64_t seed = 1;
  double timeout_s = 600;
  bool no_ignore_eos = false;
  bool json = false;
  bool dry_run = false;
  bool interleave = false;
  std::string trace;
  int64_t trace_block_tokens = 512, replay_block_tokens = 0, max_requests = 0, vocab_size = 32000;
  double time_scale = 1.0;
};

// "N" or "MIN:MAX".
Status parse_range(const std::string& name, const std::string& text, int64_t& lo, int64_t& hi) {
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    const std::string a = text.substr(0, colon);
    lo = std::stoll(a, &used);
    if (used != a.size()) throw std::invalid_argument(a);
    hi = lo;
    if (colon != std::string::npos) {
      const std::string b = text.substr(colon + 1);
      hi = std::stoll(b, &used);
      if (used != b.size()) throw std::invalid_argument(b);
    }
  } catch (const std::exception&) {
    return Status::invalid_argument("--" + name + " must be N or MIN:MAX, got '" + text + "'");
  }
  return Status::ok();
}

json distribution_json(const Distribution& d, double scale) {
  return {{"count", d.count}, {"mean", d.mean * scale}, {"p50", d.p50 * scale}, {"p90", d.p90 * scale},
          {"p99", d.p99 * scale}, {"max", d.max * scale}};
}

json plan_json(const WorkloadPlan& plan) {
  json sessions = json::array();
  for (const PlannedSession& s : plan.sessions) {
    json turns = json::array();
    for (const PlannedTurn& t : s.turns) {
      json turn = {{"user_text", t.user_text}, {"max_tokens", t.max_tokens}};
      if (!t.prompt_ids.empty()) turn["prompt_tokens"] = t.prompt_ids.size();
      turns.push_back(turn);
    }
    sessions.push_back({{"arrival_s", s.arrival_s}, {"turns", turns}});
  }
  return {{"workload", workload_kind_name(plan.kind)}, {"system_prompt", plan.system_prompt}, {"sessions", sessions}};
}

json summary_json(const BenchSummary& s) {
  json errors = json::object();
  for (const auto& [message, count] : s.errors) errors[message] = count;
  return {{"requests", s.requests},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"missing_usage", s.missing_usage},
          {"duration_s", s.duration_s},
          {"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"cached_tokens", s.cached_tokens},
          {"requests_per_s", s.requests_per_s},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"failed_streamed_tokens", s.failed_streamed_tokens},
          {"streamed_tokens_per_s", s.streamed_tokens_per_s},
          {"input_tokens_per_s", s.input_tokens_per_s},
          {"prefix_cache_hit_rate", s.prefix_cache_hit_rate},
          {"ttft_ms", distribution_json(s.ttft_s, 1e3)},
          {"itl_ms", distribution_json(s.itl_s, 1e3)},
          {"e2e_ms", distribution_json(s.e2e_s, 1e3)},
          {"errors", errors}};
}

void print_table(const std::string& title, const BenchSummary& s, FILE* out) {
  std::fprintf(out, "%s\n", title.c_str());
  std::fprintf(out, "| metric | value |\n|---|---|\n");
  std::fprintf(out, "| requests (ok / failed) | %lld / %lld |\n", static_cast<long long>(s.succeeded),
               static_cast<long long>(s.failed));
  std::fprintf(out, "| duration | %.2f s |\n", s.duration_s);
  const double ok = static_cast<double>(std::max<int64_t>(1, s.succeeded));
  std::fprintf(out, "| prompt / output tokens per request | %.1f / %.1f |\n", static_cast<double>(s.prompt_tokens) / ok,
               static_cast<double>(s.completion_tokens) / ok);
  std::fprintf(out, "| requests/s | %.3f |\n", s.requests_per_s);
  std::fprintf(out, "| output tokens/s | %.1f |\n", s.output_tokens_per_s);
  if (s.failed_streamed_tokens > 0) {
    std::fprintf(out, "| output tokens/s, failed requests' streamed tokens too | %.1f (%lld streamed by failed requests) |\n",
                 s.streamed_tokens_per_s, static_cast<long long>(s.failed_streamed_tokens));
  }
  std::fprintf(out, "| input tokens/s | %.1f |\n", s.input_tokens_per_s);
  std::fprintf(out, "| TTFT p50 / p90 / p99 | %.1f / %.1f / %.1f ms |\n", s.ttft_s.p50 * 1e3, s.ttft_s.p90 * 1e3,
               s.ttft_s.p99 * 1e3);
  std::fprintf(out, "| ITL p50 / p99 | %.2f / %.2f ms |\n", s.itl_s.p50 * 1e3, s.itl_s.p99 * 1e3);
  std::fprintf(out, "| latency p50 / p99 | %.1f / %.1f ms |\n", s.e2e_s.p50 * 1e3, s.e2e_s.p99 * 1e3);
  std::fprintf(out, "| prefix-cache hit rate | %.1f%% (%lld of %lld prompt tokens) |\n",
               s.prefix_cache_hit_rate * 100, static_cast<long long>(s.cached_tokens),
               static_cast<long long>(s.prompt_tokens));
  if (s.missing_usage > 0) {
    std::fprintf(out, "warning: %lld responses had no usage; their output tokens were counted by chunk\n",
                 static_cast<long long>(s.missing_usage));
  }
  for (const auto& [message, count] : s.errors) {
    std::fprintf(out, "error x%lld: %s\n", static_cast<long long>(count), message.c_str());
  }
}

int run_bench_serve(const BenchServeOptions& o, const Clock& clock) {
  WorkloadOptions w;
  {
    Result<WorkloadKind> kind = parse_workload_kind(o.workload);
    if (!kind) return fail(kind.status());
    w.kind = *kind;
  }
  if (Status s = parse_range("prompt-len", o.prompt_len, w.prompt_len_min, w.prompt_len_max); !s) return fail(s);
  if (Status s = parse_range("output-len", o.output_len, w.output_len_min, w.output_len_max); !s) return fail(s);
  w.num_requests = o.num_requests;
  w.system_prompt_len = o.system_prompt_len;
  w.sessions = o.sessions;
  w.turns = o.turns;
  w.rate = o.rate;
  w.seed = o.seed;
  w.trace_path = o.trace;
  w.trace_block_tokens = o.trace_block_tokens;
  w.replay_block_tokens = o.replay_block_tokens;
  w.max_requests = o.max_requests;
  w.time_scale = o.time_scale;
  if (o.vocab_size < 2 || o.vocab_size > (int64_t{1} << 30)) return fail(Status::invalid_argument("bad --vocab-size"));
  w.vocab_size = static_cast<int32_t>(o.vocab_size);
  if (w.kind != WorkloadKind::kTrace) {
    if (Status s = validate(w); !s) return fail(s);
  }
  if (o.concurrency < 1) return fail(Status::invalid_argument("--concurrency must be >= 1"));
  if (!(o.timeout_s > 0)) return fail(Status::invalid_argument("--timeout must be > 0 seconds"));
  Result<ServerUrl> url = parse_server_url(o.url);
  if (!url) return fail(url.status());

  WorkloadPlan plan;
  if (w.kind == WorkloadKind::kTrace) {
    Result<WorkloadPlan> traced = plan_trace_workload(w);
    if (!traced) return fail(traced.status());
    plan = std::move(traced).value();
  } else {
    plan = plan_workload(w);
  }
  if (o.dry_run) {
    std::printf("%s\n", plan_json(plan).dump(2).c_str());
    return 0;
  }

  RunOptions run;
  run.client.url = *url;
  run.client.timeout_s = o.timeout_s;
  run.model = o.model.empty() ? probe_model_id(run.client) : o.model;
  run.concurrency = o.concurrency;
  run.open_loop = o.rate > 0 || w.kind == WorkloadKind::kTrace;  // a trace brings its arrival times
  run.interleave = o.interleave;
  run.ignore_eos = !o.no_ignore_eos;
  const std::vector<RequestRecord> records = run_plan(plan, run, clock);
  const BenchSummary summary = summarize(records);

  char rate_text[32];
  std::snprintf(rate_text, sizeof(rate_text), "%g", o.rate);
  char scale_text[32];
  std::snprintf(scale_text, sizeof(scale_text), "%g", o.time_scale);
  const std::string mode = w.kind == WorkloadKind::kTrace ? std::string("trace arrivals x ") + scale_text
                           : run.open_loop ? std::string("open loop, Poisson ") + rate_text + " req/s"
                                           : "closed loop, concurrency " + std::to_string(o.concurrency);
  const std::string title = std::string("bench-serve ") + o.url + ": " + workload_kind_name(w.kind) + ", " + mode +
                            ", " + std::to_string(plan.total_requests()) + " requests";
  if (o.json) {
    json config = {{"url", o.url},
                   {"model", run.model},
                   {"workload", workload_kind_name(w.kind)},
                   {"mode", run.open_loop ? "open-loop" : "closed-loop"},
                   {"concurrency", run.open_loop ? json(nullptr) : json(o.concurrency)},
                   {"rate", run.open_loop ? json(o.rate) : json(nullptr)},
                   {"num_requests", plan.total_requests()},
                   {"prompt_len", {w.prompt_len_min, w.prompt_len_max}},
                   {"output_len", {w.output_len_min, w.output_len_max}},
                   {"system_prompt_len", w.system_prompt_len},
                   {"sessions", w.kind == WorkloadKind::kMultiTurn ? json(w.sessions) : json(nullptr)},
                   {"turns", w.kind == WorkloadKind::kMultiTurn ? json(w.turns) : json(nullptr)},
                   {"interleave", run.interleave},
                   {"ignore_eos", run.ignore_eos},
                   {"seed", o.seed}};
    std::printf("%s\n", json{{"config", config}, {"summary", summary_json(summary)}}.dump(2).c_str());
    print_table(title, summary, stderr);
  } else {
    print_table(title, summary, stdout);
  }
  return summary.succeeded > 0 ? 0 : 1;
}

}  // namespace

void register_bench_serve(CLI::App& app, const Clock& clock, int& exit_code) {
  auto options = std::make_shared<BenchServeOptions>();
  CLI::App* cmd = app.add_subcommand("bench-serve", "Load-test an OpenAI-compatible server over HTTP (streaming)");
  cmd->add_option("--url", options->url, "server base URL")->capture_default_str();
  cmd->add_option("--model", options->model, "\"model\" field (default: the first id of GET /v1/models)");
  cmd->add_option("--workload", options->workload, "random | shared-prefix | multi-turn | trace")->capture_default_str();
  cmd->add_option("--trace", options->trace,
                  "trace workload: a Mooncake-format or token-id JSONL file (as pagoda replay reads it)");
  cmd->add_option("--trace-block-tokens", options->trace_block_tokens, "trace: tokens per hash id in the file (512)");
  cmd->add_option("--replay-block-tokens", options->replay_block_tokens,
                  "trace: tokens each hash id becomes (smaller: the trace at reduced scale, same sharing)");
  cmd->add_option("--time-scale", options->time_scale, "trace: arrival times x this");
  cmd->add_option("--max-requests", options->max_requests, "trace: only the first N requests");
  cmd->add_option("--vocab-size", options->vocab_size, "trace: synthesized token ids are below this (the model's vocabulary)");
  cmd->add_option("--num-requests", options->num_requests, "requests (random, shared-prefix)")->capture_default_str();
  auto* concurrency = cmd->add_option("--concurrency", options->concurrency, "closed loop: requests in flight")
                          ->capture_default_str();
  auto* rate = cmd->add_option("--rate", options->rate, "open loop: Poisson arrivals per second (sessions for multi-turn)");
  concurrency->excludes(rate);
  cmd->add_option("--prompt-len", options->prompt_len, "words per prompt / user message: N or MIN:MAX")
      ->capture_default_str();
  cmd->add_option("--output-len", options->output_len, "max_tokens per request: N or MIN:MAX")->capture_default_str();
  cmd->add_option("--system-prompt-len", options->system_prompt_len, "words of the shared system prompt")
      ->capture_default_str();
  cmd->add_option("--turns", options->turns, "multi-turn: turns per session")->capture_default_str();
  cmd->add_option("--sessions", options->sessions, "multi-turn: sessions")->capture_default_str();
  cmd->add_flag("--interleave", options->interleave,
                "closed loop: sessions take turns, round robin (default: each worker runs a session to its end)")
      ->excludes(rate);
  cmd->add_option("--seed", options->seed, "workload seed")->capture_default_str();
  cmd->add_option("--timeout", options->timeout_s, "per-request timeout in seconds")->capture_default_str();
  cmd->add_flag("--no-ignore-eos", options->no_ignore_eos, "let EOS end a reply early (ignore_eos is sent by default)");
  cmd->add_flag("--json", options->json, "print JSON on stdout (the table goes to stderr)");
  cmd->add_flag("--dry-run", options->dry_run, "print the planned workload as JSON and send nothing");
  cmd->callback([options, &clock, &exit_code] { exit_code = run_bench_serve(*options, clock); });
}

}  // namespace pagoda::tools
