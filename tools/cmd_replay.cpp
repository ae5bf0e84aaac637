// pagoda replay: a request trace through Pagoda's own KV cache (sim/). Cache mode: what hit
// rate a cache of --capacity-tokens (each of --sweep-capacity) would have given the trace's
// prompts, next to the ceiling of a cache that never evicts (sim/cache_replay.h). With a KV
// geometry (--model: a GGUF, a config.json or a kvcalc preset, and --kv-dtype) sizes may be
// given in bytes ("16GiB"), and bytes moved per tier are that model's.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "router/policy.h"
#include "sim/cache_replay.h"
#include "sim/cluster_replay.h"
#include "sim/trace.h"
#include "kernels/kv_format.h"
#include "tools/commands.h"
#include "tools/kv_model_resolve.h"

namespace pagoda::tools {

namespace {

using nlohmann::json;

struct ReplayOptions {
  std::string trace;
  int64_t trace_block_tokens = 512;
  int64_t replay_block_tokens = 0;
  int64_t block_size = 16;
  std::string capacity = "inf";
  std::string sweep;
  std::string eviction = "lru";
  std::string host, disk, disk_dir, remote;
  int64_t kv_bytes_per_token = 0;
  std::string model;             // a KV geometry: GGUF, config.json or kvcalc preset
  std::string kv_dtype = "f16";  // its KV element format
  int64_t max_requests = 0;
  int64_t vocab_size = 32000;
  bool json = false;
  // Cluster mode (--instances N).
  int instances = 0;
  int prefill = 0, decode = 0;  // a P/D split instead of colocated instances
  double transfer_gbps = 0;
  std::string policy = "kv-aware";
  double overlap_weight = 1.0;
  double time_scale = 1.0;
  double prefill_tps = 5000, decode_tps = 50, decode_batch_cost = 0.05;
  int64_t max_num_seqs = 64, max_num_batched_tokens = 2048;
  double ttft_slo_ms = 0, tbt_slo_ms = 0;
  std::string global_pool;
  double global_pool_gbps = 0;
  double step_budget_ms = 100;
};

// "3M" -> 3000000, "1.5M", "512K", "2G", "4096", "inf" -> 0 (unbounded). Decimal units: tokens.
Result<int64_t> parse_tokens(const std::string& text) {
  if (text == "inf" || text == "unbounded") return int64_t{0};
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double unit = 1;
  const std::string suffix = end != nullptr ? std::string(end) : "";
  if (suffix == "K" || suffix == "k") unit = 1e3;
  else if (suffix == "M" || suffix == "m") unit = 1e6;
  else if (suffix == "G" || suffix == "g") unit = 1e9;
  else if (!suffix.empty()) return Status::invalid_argument("bad token count '" + text + "' (e.g. 4096, 512K, 3M, 1.5G, inf)");
  if (end == text.c_str() || !std::isfinite(v) || v <= 0 || v * unit > 1e13) {
    return Status::invalid_argument("bad token count '" + text + "' (e.g. 4096, 512K, 3M, 1.5G, inf)");
  }
  return static_cast<int64_t>(std::llround(v * unit));
}

// A size: tokens as parse_tokens reads them, or bytes ("16GiB", "512MB", "2TB") when a KV
// geometry gives bytes per token; bytes become the whole tokens whose KV they hold.
Result<int64_t> parse_size(const std::string& text, double bytes_per_token) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},  {"B", 1.0}};
  for (const auto& [unit, scale] : kUnits) {
    if (!std::string_view(text).ends_with(unit)) continue;
    const std::string number = text.substr(0, text.size() - std::char_traits<char>::length(unit));
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(v) || v <= 0 || v * scale > 1e18) {
      return Status::invalid_argument("bad size '" + text + "' (e.g. 3M tokens, or 16GiB with --model)");
    }
    if (bytes_per_token <= 0) {
      return Status::invalid_argument("'" + text + "' is bytes: give --model (or --kv-bytes-per-token) to turn bytes into tokens");
    }
    const auto tokens = static_cast<int64_t>(std::floor(v * scale / bytes_per_token));
    if (tokens < 1) return Status::invalid_argument("'" + text + "' holds less than one token of KV");
    return tokens;
  }
  return parse_tokens(text);
}

// The KV bytes per token of --model at --kv-dtype (kvcalc's arithmetic, every layer cached).
struct Geometry {
  std::string name;
  double bytes_per_token = 0;
};
Result<Geometry> kv_geometry(const std::string& model, const std::string& dtype_name, int64_t block_size) {
  PAGODA_ASSIGN_OR_RETURN(ResolvedModel m, resolve_model(model));
  auto dtype = kernels::kv_dtype_from_name(dtype_name);
  if (!dtype) return Status::invalid_argument("unknown --kv-dtype '" + dtype_name + "' (f32, f16, bf16, fp8-e4m3, fp8-e5m2, int8, int4)");
  kvcache::KvPlanOptions plan;
  plan.block_size = block_size;
  PAGODA_ASSIGN_OR_RETURN(kvcache::CapacityPlan p, kvcache::plan_capacity(m.spec, plan, {*dtype}));
  return Geometry{m.spec.name + " (" + m.source + "), " + dtype_name + " KV", p.rows[0].bytes_per_token};
}

std::string bytes_label(double bytes) {
  char buf[32];
  if (bytes >= 1099511627776.0) std::snprintf(buf, sizeof(buf), "%.2f TiB", bytes / 1099511627776.0);
  else if (bytes >= 1073741824.0) std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  else std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
  return buf;
}

std::string tokens_label(int64_t n) {
  if (n == 0) return "inf";
  char buf[32];
  if (n % 1000000000 == 0) std::snprintf(buf, sizeof(buf), "%lldG", (long long)(n / 1000000000));
  else if (n % 1000000 == 0) std::snprintf(buf, sizeof(buf), "%lldM", (long long)(n / 1000000));
  else if (n % 1000 == 0) std::snprintf(buf, sizeof(buf), "%lldK", (long long)(n / 1000));
  else std::snprintf(buf, sizeof(buf), "%lld", (long long)n);
  return buf;
}

struct Run {
  int64_t capacity_tokens = 0;
  sim::CacheReplayResult result;
  double seconds = 0;
};

Result<Run> replay_once(const std::vector<sim::TraceRequest>& trace, sim::CacheReplayOptions options, int64_t capacity) {
  options.capacity_tokens = capacity;
  if (capacity == 0) options.host_tokens = options.disk_tokens = options.remote_tokens = 0;  // the ceiling: the pool alone
  const auto start = std::chrono::steady_clock::now();
  PAGODA_ASSIGN_OR_RETURN(sim::CacheReplayResult r, sim::replay_cache(trace, options));
  return Run{capacity, r, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

json by_tier(const sim::CacheReplayResult& r) {
  const double prompt = r.prompt_tokens > 0 ? static_cast<double>(r.prompt_tokens) : 1.0;
  json j = {{"pool", r.pool_hit_tokens / prompt}};
  for (const sim::TierReplayStats& t : r.tiers) j[t.name] = t.hit_tokens / prompt;
  return j;
}

json run_json(const Run& run) {
  const sim::CacheReplayResult& r = run.result;
  return {{"capacity_tokens", run.capacity_tokens == 0 ? json(nullptr) : json(run.capacity_tokens)},
          {"capacity_blocks", r.capacity_blocks}, {"hit_rate", r.hit_rate}, {"hit_tokens", r.hit_tokens},
          {"evictions", r.evictions}, {"blocks_allocated", r.blocks_allocated},
          {"peak_blocks_held", r.peak_blocks_held}, {"rejected", r.rejected}, {"seconds", run.seconds},
          {"hit_rate_by_tier", by_tier(r)}};
}

json percentiles_json(const sim::Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}};
}

int replay_cluster_mode(const ReplayOptions& o, const std::vector<sim::TraceRequest>& trace,
                        const sim::TraceOptions& trace_options, int64_t capacity, const Geometry& geometry) {
  if (capacity == 0) return fail(Status::invalid_argument("cluster mode needs --capacity-tokens (each instance's pool)"));
  std::vector<router::RoutingPolicy> policies;
  if (o.policy == "all") {
    policies = {router::RoutingPolicy::kKvAware, router::RoutingPolicy::kLeastLoad, router::RoutingPolicy::kRoundRobin};
  } else if (auto p = router::routing_policy_from_name(o.policy)) {
    policies = {*p};
  } else {
    return fail(Status::invalid_argument("unknown --policy '" + o.policy + "' (kv-aware, least-load, round-robin, all)"));
  }
  auto eviction = kvcache::eviction_policy_from_name(o.eviction);
  if (!eviction) return fail(Status::invalid_argument("unknown --eviction '" + o.eviction + "' (lru, lfu, priority)"));
  if (!o.host.empty() || !o.disk.empty() || !o.remote.empty()) {
    return fail(Status::invalid_argument("--host-tokens / --disk-tokens / --remote-tokens are cache mode's tiers; a "
                                         "cluster shares --global-pool-tokens"));
  }
  sim::ClusterReplayOptions c;
  c.instances = o.instances;
  c.prefill_instances = o.prefill;
  c.decode_instances = o.decode;
  c.transfer_gbps = o.transfer_gbps;
  c.capacity_tokens = capacity;
  c.block_size = o.block_size;
  c.eviction = *eviction;
  c.overlap_weight = o.overlap_weight;
  c.time_scale = o.time_scale;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.cost = sim::StepCostProfile{o.prefill_tps, o.decode_tps, o.decode_batch_cost};
  c.ttft_slo_s = o.ttft_slo_ms * 1e-3;
  c.tbt_slo_s = o.tbt_slo_ms * 1e-3;
  c.trace = trace_options;
  c.kv_bytes_per_token = static_cast<int64_t>(std::ceil(geometry.bytes_per_token));
  c.step_budget_ms = o.step_budget_ms;
  c.global_pool_gbps = o.global_pool_gbps;
  if (!o.global_pool.empty()) {
    auto n = parse_size(o.global_pool, geometry.bytes_per_token);
    if (!n.is_ok() || *n == 0) {
      return fail(n.is_ok() ? Status::invalid_argument("bad --global-pool-tokens '" + o.global_pool + "'")
                            : n.status().with_context("--global-pool-tokens"));
    }
    c.global_pool_tokens = *n;
  }
  json runs = json::array();
  if (!o.json) {
    const std::string shape = o.prefill > 0 ? std::to_string(o.prefill) + " prefill + " + std::to_string(o.decode) + " decode instances"
                                            : std::to_string(o.instances) + " instances";
    std::printf("cluster   %s x %s tokens of cache, block %lld; steps: prefill %g tok/s, decode %g tok/s "
                "(+%g per extra sequence); arrivals x %g\n\n",
                shape.c_str(), tokens_label(capacity).c_str(), (long long)o.block_size, o.prefill_tps, o.decode_tps,
                o.decode_batch_cost, o.time_scale);
    if (o.prefill > 0) {
      std::printf("P/D       prompts run on the prefill instances (policy below), then their KV moves to the least-loaded "
                  "decode instance (%s)\n\n",
                  o.transfer_gbps > 0 ? (std::to_string(o.transfer_gbps) + " GB/s").c_str() : "transfers take no time");
    }
    if (c.global_pool_tokens > 0) {
      std::printf("global    a shared pool of %s tokens below every instance (write-through, loaded at admission%s)\n\n",
                  tokens_label(c.global_pool_tokens).c_str(),
                  o.global_pool_gbps > 0 ? (", " + std::to_string(o.global_pool_gbps) + " GB/s").c_str() : "");
    }
    std::printf("%-12s %9s %11s %11s %11s %10s %10s %9s %9s %10s %8s\n", "policy", "hit rate", "TTFT p50", "TTFT p90",
                "TTFT p99", "TBT p50", "TBT p99", "SLO met", "rejected", "busy max/mean", "replay");
  }
  for (router::RoutingPolicy policy : policies) {
    c.policy = policy;
    const auto start = std::chrono::steady_clock::now();
    auto r = sim::replay_cluster(trace, c);
    if (!r.is_ok()) return fail(r.status());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double busy_max = 0, busy_sum = 0;
    json inst = json::array();
    for (const sim::InstanceReplayStats& i : r->per_instance) {
      busy_max = std::max(busy_max, i.busy_s);
      busy_sum += i.busy_s;
      inst.push_back({{"role", o.prefill == 0 ? "colocated" : i.decode ? "decode" : "prefill"}, {"requests", i.requests}, {"prompt_tokens", i.prompt_tokens}, {"hit_tokens", i.hit_tokens},
                      {"hit_rate", i.prompt_tokens > 0 ? static_cast<double>(i.hit_tokens) / i.prompt_tokens : 0.0},
                      {"busy_s", i.busy_s}, {"steps", i.steps}, {"preemptions", i.preemptions}});
    }
    const double busy_mean = busy_sum / static_cast<double>(std::max<size_t>(1, r->per_instance.size()));
    if (o.json) {
      runs.push_back({{"policy", router::routing_policy_name(policy)}, {"requests", r->requests},
                      {"finished", r->finished}, {"rejected", r->rejected}, {"prompt_tokens", r->prompt_tokens},
                      {"hit_tokens", r->hit_tokens}, {"hit_rate", r->hit_rate},
                      {"hit_rate_by_tier",
                       {{"pool", static_cast<double>(r->hit_tokens - r->global_hit_tokens) / std::max<int64_t>(1, r->prompt_tokens)},
                        {"global", static_cast<double>(r->global_hit_tokens) / std::max<int64_t>(1, r->prompt_tokens)}}},
                      {"ttft_s", percentiles_json(r->ttft_s)},
                      {"tbt_s", percentiles_json(r->tbt_s)}, {"slo_attainment", r->slo_attainment},
                      {"makespan_s", r->makespan_s}, {"busy_max_over_mean", busy_mean > 0 ? busy_max / busy_mean : 0.0},
                      {"per_instance", inst}, {"seconds", seconds}});
      if (o.prefill > 0) {
        runs.back()["transfers"] = r->transfers;
        runs.back()["transfer_bytes"] = r->transfer_bytes;
        runs.back()["decode_hit_tokens"] = r->decode_hit_tokens;
      }
    } else {
      std::printf("%-12s %8.2f%% %10.3fs %10.3fs %10.3fs %8.1fms %8.1fms %8.1f%% %9lld %13.2f %7.2fs\n",
                  router::routing_policy_name(policy), 100 * r->hit_rate, r->ttft_s.p50, r->ttft_s.p90, r->ttft_s.p99,
                  1e3 * r->tbt_s.p50, 1e3 * r->tbt_s.p99, 100 * r->slo_attainment, (long long)r->rejected,
                  busy_mean > 0 ? busy_max / busy_mean : 0.0, seconds);
    }
  }
  if (o.json) {
    json j = {{"trace", o.trace}, {"mode", o.prefill > 0 ? "pd" : "cluster"}, {"instances", o.prefill > 0 ? o.prefill + o.decode : o.instances},
              {"capacity_tokens", capacity},
              {"block_size", o.block_size}, {"time_scale", o.time_scale}, {"runs", runs}};
    if (geometry.bytes_per_token > 0) {
      j["geometry"] = geometry.name;
      j["kv_bytes_per_token"] = geometry.bytes_per_token;
      j["capacity_bytes"] = static_cast<double>(capacity) * geometry.bytes_per_token;
    }
    if (runs.size() == 1) {  // one policy: its figures at the top level as well
      for (auto& [k, v] : runs[0].items()) j[k] = v;
    }
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

int replay(const ReplayOptions& o) {
  sim::TraceOptions trace_options;
  trace_options.block_tokens = o.trace_block_tokens;
  trace_options.replay_block_tokens = o.replay_block_tokens;
  trace_options.max_requests = o.max_requests;
  if (o.vocab_size < 2 || o.vocab_size > (int64_t{1} << 30)) return fail(Status::invalid_argument("bad --vocab-size"));
  trace_options.vocab_size = static_cast<int32_t>(o.vocab_size);
  if (o.trace_block_tokens <= 0) return fail(Status::invalid_argument("--trace-block-tokens must be positive"));
  auto eviction = kvcache::eviction_policy_from_name(o.eviction);
  if (!eviction) return fail(Status::invalid_argument("unknown --eviction '" + o.eviction + "' (lru, lfu, priority)"));
  Geometry geometry;
  if (!o.model.empty()) {
    if (o.kv_bytes_per_token > 0) return fail(Status::invalid_argument("give --model or --kv-bytes-per-token, not both"));
    auto g = kv_geometry(o.model, o.kv_dtype, o.block_size);
    if (!g.is_ok()) return fail(g.status().with_context("--model"));
    geometry = *g;
  } else if (o.kv_bytes_per_token > 0) {
    geometry = Geometry{"--kv-bytes-per-token", static_cast<double>(o.kv_bytes_per_token)};
  }
  const double bpt = geometry.bytes_per_token;
  auto capacity = parse_size(o.capacity, bpt);
  if (!capacity.is_ok()) return fail(capacity.status().with_context("--capacity-tokens"));
  std::vector<int64_t> sweep;
  if (!o.sweep.empty()) {
    size_t pos = 0;
    while (pos <= o.sweep.size()) {
      const size_t comma = std::min(o.sweep.find(',', pos), o.sweep.size());
      auto n = parse_size(o.sweep.substr(pos, comma - pos), bpt);
      if (!n.is_ok()) return fail(n.status().with_context("--sweep-capacity"));
      sweep.push_back(*n);
      pos = comma + 1;
    }
  }
  auto trace = sim::read_trace(o.trace, trace_options);
  if (!trace.is_ok()) return fail(trace.status());
  if ((o.prefill > 0) != (o.decode > 0)) return fail(Status::invalid_argument("a P/D split needs both --prefill N and --decode M"));
  if (o.prefill > 0 && o.instances > 0) return fail(Status::invalid_argument("give --instances or --prefill/--decode, not both"));
  if (o.instances > 0 || o.prefill > 0) return replay_cluster_mode(o, *trace, trace_options, *capacity, geometry);
  sim::CacheReplayOptions options;
  const SteadyClock clock;
  options.clock = &clock;
  if (!o.host.empty()) {
    auto n = parse_size(o.host, bpt);
    if (!n.is_ok() || *n == 0) return fail(n.is_ok() ? Status::invalid_argument("bad --host-tokens '" + o.host + "'") : n.status().with_context("--host-tokens"));
    options.host_tokens = *n;
  }
  if (!o.disk.empty()) {
    auto n = parse_size(o.disk, bpt);
    if (!n.is_ok() || *n == 0) return fail(n.is_ok() ? Status::invalid_argument("bad --disk-tokens '" + o.disk + "'") : n.status().with_context("--disk-tokens"));
    if (o.disk_dir.empty()) return fail(Status::invalid_argument("--disk-tokens needs --disk-dir (where the SSD tier's files go)"));
    options.disk_tokens = *n;
    options.disk_dir = o.disk_dir;
  }
  if (!o.remote.empty()) {
    auto n = parse_size(o.remote, bpt);
    if (!n.is_ok() || *n == 0) {
      return fail(n.is_ok() ? Status::invalid_argument("bad --remote-tokens '" + o.remote + "'")
                            : n.status().with_context("--remote-tokens"));
    }
    options.remote_tokens = *n;
  }
  if (o.kv_bytes_per_token < 0) return fail(Status::invalid_argument("--kv-bytes-per-token must be >= 0"));
  options.kv_bytes_per_token = static_cast<int64_t>(std::ceil(bpt));
  if ((options.host_tokens > 0 || options.disk_tokens > 0 || options.remote_tokens > 0) && *capacity == 0) {
    return fail(Status::invalid_argument("--host-tokens / --disk-tokens / --remote-tokens need a pool --capacity-tokens "
                                         "(an unbounded pool never evicts into them)"));
  }
  options.block_size = o.block_size;
  options.eviction = *eviction;
  options.trace = trace_options;

  auto main_run = replay_once(*trace, options, *capacity);
  if (!main_run.is_ok()) return fail(main_run.status());
  auto ceiling = *capacity == 0 ? main_run : replay_once(*trace, options, 0);
  if (!ceiling.is_ok()) return fail(ceiling.status());
  std::vector<Run> sweep_runs;
  for (int64_t n : sweep) {
    auto run = replay_once(*trace, options, n);
    if (!run.is_ok()) return fail(run.status());
    sweep_runs.push_back(*run);
  }
  const sim::CacheReplayResult& r = main_run->result;
  int64_t output_tokens = 0;
  for (const sim::TraceRequest& q : *trace) output_tokens += q.output_length;

  if (o.json) {
    json j = run_json(*main_run);
    j["trace"] = o.trace;
    j["mode"] = "cache";
    j["requests"] = r.requests;
    j["prompt_tokens"] = r.prompt_tokens;
    j["output_tokens"] = output_tokens;
    j["block_size"] = o.block_size;
    j["eviction"] = o.eviction;
    j["ceiling_hit_rate"] = ceiling->result.hit_rate;
    if (bpt > 0) {
      j["geometry"] = geometry.name;
      j["kv_bytes_per_token"] = bpt;
      j["capacity_bytes"] = *capacity == 0 ? json(nullptr) : json(static_cast<double>(*capacity) * bpt);
    }
    json tiers = json::array();
    for (const sim::TierReplayStats& t : r.tiers) {
      tiers.push_back({{"tier", t.name}, {"capacity_blocks", t.capacity_blocks}, {"hit_tokens", t.hit_tokens},
                       {"stored_blocks", t.stored_blocks}, {"loaded_blocks", t.loaded_blocks},
                       {"dropped_writes", t.dropped_writes}, {"bytes_in", t.bytes_in}, {"bytes_out", t.bytes_out}});
    }
    j["tiers"] = tiers;
    j["pool_hit_tokens"] = r.pool_hit_tokens;
    j["requests_per_s"] = main_run->seconds > 0 ? r.requests / main_run->seconds : 0.0;
    json s = json::array();
    for (const Run& run : sweep_runs) s.push_back(run_json(run));
    if (!sweep_runs.empty()) j["sweep"] = s;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("trace     %s: %lld requests, %.2fM prompt tokens, %.2fM output tokens\n", o.trace.c_str(),
              (long long)r.requests, r.prompt_tokens / 1e6, output_tokens / 1e6);
  std::printf("cache     Pagoda's block manager: block %lld tokens, %s eviction, prompts only, one at a time\n",
              (long long)o.block_size, o.eviction.c_str());
  if (bpt > 0) {
    std::printf("geometry  %s: %.0f B/token; %s tokens = %s\n", geometry.name.c_str(), bpt,
                tokens_label(*capacity).c_str(), *capacity == 0 ? "unbounded" : bytes_label(static_cast<double>(*capacity) * bpt).c_str());
  }
  std::printf("\n");
  std::printf("%-14s %9s %14s %12s %13s %9s %9s\n", "capacity", "hit rate", "hit tokens", "evictions", "peak blocks",
              "rejected", "replay");
  auto row = [&](const Run& run, const char* note) {
    const sim::CacheReplayResult& x = run.result;
    std::printf("%-14s %8.2f%% %14lld %12lld %13lld %9lld %8.2fs%s\n",
                (tokens_label(run.capacity_tokens) + (run.capacity_tokens == 0 ? " (ceiling)" : "")).c_str(),
                100 * x.hit_rate, (long long)x.hit_tokens, (long long)x.evictions, (long long)x.peak_blocks_held,
                (long long)x.rejected, run.seconds, note);
  };
  for (const Run& run : sweep_runs) row(run, "");
  row(*main_run, "");
  if (*capacity != 0) row(*ceiling, "");
  if (!r.tiers.empty()) {
    std::printf("\nat %s: pool %.2f%%", tokens_label(*capacity).c_str(),
                100.0 * r.pool_hit_tokens / std::max<int64_t>(1, r.prompt_tokens));
    for (const sim::TierReplayStats& t : r.tiers) {
      std::printf(", %s %.2f%% (%lld blocks held at most, %lld stored, %lld loaded, %lld dropped)", t.name.c_str(),
                  100.0 * t.hit_tokens / std::max<int64_t>(1, r.prompt_tokens), (long long)t.capacity_blocks,
                  (long long)t.stored_blocks, (long long)t.loaded_blocks, (long long)t.dropped_writes);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void register_replay(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReplayOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "replay a request trace (Mooncake JSONL or token-id prompts) through Pagoda's KV cache: hit rates");
  cmd->add_option("--trace", o->trace, "trace file: Mooncake JSONL (timestamp, input_length, output_length, hash_ids) "
                                       "or one {\"prompt_token_ids\": [...]} a line")->required();
  cmd->add_option("--trace-block-tokens", o->trace_block_tokens, "tokens per hash id in the trace (Mooncake: 512)");
  cmd->add_option("--replay-block-tokens", o->replay_block_tokens,
                  "tokens each hash id becomes (smaller: the trace at reduced scale, same sharing; default the trace's)");
  cmd->add_option("--block-size", o->block_size, "Pagoda's KV block (tokens)");
  cmd->add_option("--capacity-tokens", o->capacity, "cache size in tokens (4096, 512K, 3M, 1.5G or inf, the default), or in bytes with --model (16GiB, 80GB)");
  cmd->add_option("--sweep-capacity", o->sweep, "replay once per capacity, e.g. 1M,3M,10M,50M");
  cmd->add_option("--eviction", o->eviction, "lru (default), lfu or priority");
  cmd->add_option("--host-tokens", o->host, "a host DRAM tier below the pool, in tokens (the real tier stack, write-back)");
  cmd->add_option("--disk-tokens", o->disk, "an SSD tier below the host tier, in tokens (needs --disk-dir)");
  cmd->add_option("--disk-dir", o->disk_dir, "directory for the SSD tier's slot files");
  cmd->add_option("--remote-tokens", o->remote,
                  "a remote tier at the bottom of the stack with a Redis tier's semantics (LRU, drops what it evicts), "
                  "in tokens");
  cmd->add_option("--kv-bytes-per-token", o->kv_bytes_per_token,
                  "KV bytes per token of the model being sized (pagoda kvcalc): bytes moved per tier");
  cmd->add_option("--model", o->model, "a KV geometry (GGUF, config.json or kvcalc preset, e.g. llama-3-70b): sizes may "
                                       "then be bytes (16GiB, 512MB) and tiers move its bytes");
  cmd->add_option("--kv-dtype", o->kv_dtype, "--model's KV element format (f16 default; f32, bf16, fp8-e4m3, int8, int4, ...)");
  cmd->add_option("--max-requests", o->max_requests, "replay only the trace's first N requests");
  cmd->add_option("--vocab-size", o->vocab_size, "synthesized token ids are below this");
  cmd->add_flag("--json", o->json, "one JSON object");
  cmd->add_option("--instances", o->instances,
                  "cluster mode: N instances behind the router's policy, each with --capacity-tokens of cache, on a "
                  "simulated clock");
  cmd->add_option("--prefill", o->prefill, "cluster mode with a P/D split: N prefill instances (with --decode)");
  cmd->add_option("--decode", o->decode, "P/D split: M decode instances, each taking the least-loaded share of handed-off prompts");
  cmd->add_option("--transfer-gbps", o->transfer_gbps, "P/D split: prefill -> decode KV bandwidth in GB/s "
                                                        "(with --model or --kv-bytes-per-token; 0: free)");
  cmd->add_option("--policy", o->policy, "cluster mode: kv-aware (default), least-load, round-robin or all");
  cmd->add_option("--overlap-weight", o->overlap_weight, "cluster mode, kv-aware: the router's --overlap-weight");
  cmd->add_option("--time-scale", o->time_scale, "cluster mode: arrival times x this (0.5: twice the rate)");
  cmd->add_option("--prefill-tps", o->prefill_tps, "cluster mode: an instance's prefill tokens/s");
  cmd->add_option("--decode-tps", o->decode_tps, "cluster mode: one decoding sequence's tokens/s");
  cmd->add_option("--decode-batch-cost", o->decode_batch_cost,
                  "cluster mode: each further decoding sequence's share of a decode step's time");
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "cluster mode: sequences per step of an instance");
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "cluster mode: tokens per step of an instance");
  cmd->add_option("--ttft-slo", o->ttft_slo_ms, "cluster mode: TTFT objective in ms (SLO attainment)");
  cmd->add_option("--tbt-slo", o->tbt_slo_ms, "cluster mode: mean time between tokens objective in ms");
  cmd->add_option("--step-budget-ms", o->step_budget_ms,
                  "cluster mode: the serving engine's step latency budget, as serve's (0: off)");
  cmd->add_option("--global-pool-tokens", o->global_pool,
                  "cluster mode: one pool shared by every instance (a Redis tier's semantics), in tokens");
  cmd->add_option("--global-pool-gbps", o->global_pool_gbps,
                  "cluster mode: load bandwidth from the global pool in GB/s (with --kv-bytes-per-token; 0: free)");
  cmd->callback([o, &exit_code] { exit_code = replay(*o); });
}

}  // namespace pagoda::tools
