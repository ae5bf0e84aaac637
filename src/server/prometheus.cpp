#include "server/prometheus.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pagoda::server {

namespace {

// Shortest text that reads back as the same double ("0.001", "2.5", "30").
std::string number(double x) {
  char buf[32];
  if (x == std::floor(x) && std::fabs(x) < 1e15) {  // integers in full ("120", not "1.2e+02")
    std::snprintf(buf, sizeof(buf), "%.0f", x);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, x);
    if (std::strtod(shorter, nullptr) == x) return shorter;
  }
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value) { out += name + " " + number(value) + "\n"; }

void counter(std::string& out, const char* name, const char* help, int64_t value) {
  header(out, name, "counter", help);
  sample(out, name, static_cast<double>(value));
}

void gauge(std::string& out, const char* name, const char* help, double value) {
  header(out, name, "gauge", help);
  sample(out, name, value);
}

void histogram(std::string& out, const char* name, const char* help, const engine::Histogram& h) {
  header(out, name, "histogram", help);
  int64_t cumulative = 0;
  for (size_t i = 0; i < engine::Histogram::kBounds.size(); ++i) {
    cumulative += h.buckets[i];
    sample(out, std::string(name) + "_bucket{le=\"" + number(engine::Histogram::kBounds[i]) + "\"}",
           static_cast<double>(cumulative));
  }
  cumulative += h.buckets.back();
  sample(out, std::string(name) + "_bucket{le=\"+Inf\"}", static_cast<double>(cumulative));
  sample(out, std::string(name) + "_sum", h.sum);
  sample(out, std::string(name) + "_count", static_cast<double>(h.count));
}

}  // namespace

std::string prometheus_text(const engine::ServingMetrics& m) {
  std::string out;
  histogram(out, "pagoda_time_to_first_token_seconds", "Time from request arrival to its first generated token.", m.ttft);
  histogram(out, "pagoda_inter_token_latency_seconds", "Time between consecutive tokens of a choice.", m.inter_token);
  histogram(out, "pagoda_e2e_request_latency_seconds", "Time from request arrival to its end.", m.e2e);
  histogram(out, "pagoda_request_queue_time_seconds", "Time from request arrival to its first scheduled step.", m.queue);

  counter(out, "pagoda_prompt_tokens_total", "Prompt tokens of admitted requests.", m.prompt_tokens);
  counter(out, "pagoda_generation_tokens_total", "Generated tokens.", m.generation_tokens);
  header(out, "pagoda_requests_finished_total", "counter", "Finished choices by reason (stop, length), and aborted or failed requests (abort, error).");
  sample(out, "pagoda_requests_finished_total{reason=\"stop\"}", static_cast<double>(m.finished_stop));
  sample(out, "pagoda_requests_finished_total{reason=\"length\"}", static_cast<double>(m.finished_length));
  sample(out, "pagoda_requests_finished_total{reason=\"abort\"}", static_cast<double>(m.finished_abort));
  sample(out, "pagoda_requests_finished_total{reason=\"error\"}", static_cast<double>(m.finished_error));
  counter(out, "pagoda_preemptions_total", "Running requests preempted for lack of KV blocks (recomputed later).", m.preemptions);
  counter(out, "pagoda_kv_evicted_blocks_total", "Cached KV blocks dropped by the eviction policy.", m.evicted_blocks);
  counter(out, "pagoda_prefix_cache_queried_tokens_total", "Prompt tokens looked up in the prefix cache.", m.prefix_queried_tokens);
  counter(out, "pagoda_prefix_cache_hit_tokens_total", "Prompt tokens found in the prefix cache.", m.prefix_hit_tokens);
  counter(out, "pagoda_engine_steps_total", "Scheduler steps (forward passes).", m.steps);

  gauge(out, "pagoda_requests_running", "Requests being prefilled or decoded.", static_cast<double>(m.running));
  gauge(out, "pagoda_requests_waiting", "Requests queued for admission.", static_cast<double>(m.waiting));
  header(out, "pagoda_kv_blocks", "gauge", "KV blocks by state.");
  sample(out, "pagoda_kv_blocks{state=\"in_use\"}", static_cast<double>(m.kv_blocks_in_use));
  sample(out, "pagoda_kv_blocks{state=\"cached\"}", static_cast<double>(m.kv_blocks_cached));
  sample(out, "pagoda_kv_blocks{state=\"free\"}", static_cast<double>(m.kv_blocks_free));
  gauge(out, "pagoda_kv_blocks_capacity", "KV blocks in the pool.", static_cast<double>(m.kv_blocks_total));
  gauge(out, "pagoda_kv_usage_ratio", "Fraction of KV blocks in use.",
        m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_in_use) / static_cast<double>(m.kv_blocks_total) : 0.0);
  return out;
}

}  // namespace pagoda::server
