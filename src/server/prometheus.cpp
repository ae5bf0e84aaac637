#include "server/prometheus.h"

#include "server/http/prometheus_text.h"

namespace pagoda::server {

namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  http::prometheus_header(out, name, type, help);
}

void sample(std::string& out, const std::string& name, double value) { http::prometheus_sample(out, name, value); }

void counter(std::string& out, const char* name, const char* help, int64_t value) {
  header(out, name, "counter", help);
  sample(out, name, static_cast<double>(value));
}

void gauge(std::string& out, const char* name, const char* help, double value) {
  header(out, name, "gauge", help);
  sample(out, name, value);
}

void histogram(std::string& out, const char* name, const char* help, const engine::Histogram& h) {
  http::prometheus_histogram(out, name, help, engine::Histogram::kBounds, h.buckets, h.sum, h.count);
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
  gauge(out, "pagoda_kv_pins", "Live pins of prompt prefixes (POST /v1/cache/pin).", static_cast<double>(m.pins));
  gauge(out, "pagoda_kv_pinned_blocks", "Distinct KV blocks held by pins (never evicted while pinned).",
        static_cast<double>(m.kv_blocks_pinned));
  counter(out, "pagoda_kv_pins_expired_total", "Pins dropped when their ttl ran out.", m.pins_expired);
  gauge(out, "pagoda_kv_usage_ratio", "Fraction of KV blocks in use.",
        m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_in_use) / static_cast<double>(m.kv_blocks_total) : 0.0);
  return out;
}

}  // namespace pagoda::server
