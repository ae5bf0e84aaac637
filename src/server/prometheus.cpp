#include "server/prometheus.h"

#include <array>

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

// One series per tier: name{tier="host"} value.
template <typename F>
void per_tier(std::string& out, const char* name, const char* type, const char* help,
              const std::vector<engine::TierMetrics>& tiers, F value) {
  header(out, name, type, help);
  for (const engine::TierMetrics& t : tiers) {
    sample(out, std::string(name) + "{tier=\"" + http::prometheus_label(t.name) + "\"}", static_cast<double>(value(t)));
  }
}

void tier_metrics(std::string& out, const engine::ServingMetrics& m) {
  const auto& t = m.tiers;
  using T = engine::TierMetrics;
  per_tier(out, "pagoda_kv_tier_enabled", "gauge", "1 while the tier serves, 0 after a fault disabled it.", t,
           [](const T& x) { return x.enabled ? 1 : 0; });
  per_tier(out, "pagoda_kv_tier_blocks", "gauge", "KV blocks held by the tier.", t, [](const T& x) { return x.used_blocks; });
  per_tier(out, "pagoda_kv_tier_blocks_capacity", "gauge", "KV blocks the tier can hold.", t,
           [](const T& x) { return x.capacity_blocks; });
  per_tier(out, "pagoda_kv_tier_hit_tokens_total", "counter", "Prompt tokens loaded from the tier into the pool.", t,
           [](const T& x) { return x.hit_tokens; });
  per_tier(out, "pagoda_kv_tier_read_bytes_total", "counter", "Bytes read from the tier.", t,
           [](const T& x) { return x.bytes_read; });
  per_tier(out, "pagoda_kv_tier_written_bytes_total", "counter", "Bytes written to the tier.", t,
           [](const T& x) { return x.bytes_written; });
  per_tier(out, "pagoda_kv_tier_offloaded_blocks_total", "counter", "Blocks put into the tier from the pool.", t,
           [](const T& x) { return x.offloaded_blocks; });
  per_tier(out, "pagoda_kv_tier_demoted_blocks_total", "counter", "Blocks put into the tier by the tier above it.", t,
           [](const T& x) { return x.demoted_blocks; });
  per_tier(out, "pagoda_kv_tier_evicted_blocks_total", "counter", "Blocks the tier evicted to make room.", t,
           [](const T& x) { return x.evicted_blocks; });
  per_tier(out, "pagoda_kv_tier_failed_loads_total", "counter", "Loads that stopped at a block of the tier (miss, corrupt record, I/O error); the rest was recomputed.", t,
           [](const T& x) { return x.failed_loads; });
  per_tier(out, "pagoda_kv_tier_corrupt_records_total", "counter", "Records that failed verification and were dropped, never used.", t,
           [](const T& x) { return x.corrupt_records; });
  per_tier(out, "pagoda_kv_tier_faults_total", "counter", "I/O or connection errors of the tier.", t,
           [](const T& x) { return x.faults; });
  per_tier(out, "pagoda_kv_tier_dropped_writes_total", "counter",
           "Blocks a put did not store and that will not be retried (a bad record, retries used up, the tier disabled, "
           "a failed demotion).", t, [](const T& x) { return x.dropped_writes; });
  per_tier(out, "pagoda_kv_tier_retried_writes_total", "counter",
           "Committed blocks put again after the tier refused them as busy (write buffers or slots in flight).", t,
           [](const T& x) { return x.retried_writes; });
  const char* lat = "pagoda_kv_tier_load_latency_seconds";
  header(out, lat, "histogram", "Latency of reads from the tier into the pool.");
  const auto& bounds = kvcache::LatencyBuckets::kBounds;
  for (const engine::TierMetrics& x : t) {
    const std::string label = "tier=\"" + http::prometheus_label(x.name) + "\"";
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cumulative += x.load_latency.buckets[i];
      sample(out, std::string(lat) + "_bucket{" + label + ",le=\"" + http::prometheus_number(bounds[i]) + "\"}",
             static_cast<double>(cumulative));
    }
    cumulative += x.load_latency.buckets.back();
    sample(out, std::string(lat) + "_bucket{" + label + ",le=\"+Inf\"}", static_cast<double>(cumulative));
    sample(out, std::string(lat) + "_sum{" + label + "}", x.load_latency.sum);
    sample(out, std::string(lat) + "_count{" + label + "}", static_cast<double>(x.load_latency.count));
  }
  header(out, "pagoda_kv_tier_load_decisions_total", "counter",
         "Admissions with blocks in a tier, by the cost model's choice: load them, or recompute (some of) them.");
  sample(out, "pagoda_kv_tier_load_decisions_total{decision=\"load\"}", static_cast<double>(m.tier_load_decisions));
  sample(out, "pagoda_kv_tier_load_decisions_total{decision=\"recompute\"}", static_cast<double>(m.tier_recompute_decisions));
}

// Expert load of a mixture-of-experts model, per MoE layer: the tokens routed through it, and a
// histogram of its experts by load relative to an even spread (1 = routed / n_expert): a hot
// expert sits in a high bucket, an idle one at 0. What a capacity planner asks about (which
// experts saturate, whether a layer's routing is skewed) without one series per expert.
void expert_metrics(std::string& out, const engine::ServingMetrics& m) {
  constexpr std::array<double, 7> kBounds = {0, 0.25, 0.5, 1, 2, 4, 8};
  const int64_t E = m.n_expert, n_layer = static_cast<int64_t>(m.expert_tokens.size()) / E;
  header(out, "pagoda_moe_routed_tokens_total", "counter",
         "Tokens routed through each mixture-of-experts layer (a token counts once per expert it runs).");
  for (int64_t l = m.moe_first_layer; l < n_layer; ++l) {
    int64_t routed = 0;
    for (int64_t e = 0; e < E; ++e) routed += m.expert_tokens[l * E + e];
    sample(out, "pagoda_moe_routed_tokens_total{layer=\"" + std::to_string(l) + "\"}", static_cast<double>(routed));
  }
  const char* name = "pagoda_moe_expert_load_ratio";
  header(out, name, "histogram",
         "Experts of each mixture-of-experts layer by the tokens routed to them relative to an even spread "
         "(1: the layer's routed tokens / experts; 0: never chosen).");
  for (int64_t l = m.moe_first_layer; l < n_layer; ++l) {
    const int64_t* routed = m.expert_tokens.data() + l * E;
    int64_t total = 0;
    for (int64_t e = 0; e < E; ++e) total += routed[e];
    const double even = static_cast<double>(total) / static_cast<double>(E);
    std::array<int64_t, kBounds.size()> below{};
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      const double ratio = total > 0 ? static_cast<double>(routed[e]) / even : 0.0;
      sum += ratio;
      for (size_t b = 0; b < kBounds.size(); ++b) below[b] += ratio <= kBounds[b] ? 1 : 0;
    }
    const std::string label = "layer=\"" + std::to_string(l) + "\"";
    for (size_t b = 0; b < kBounds.size(); ++b) {
      sample(out, std::string(name) + "_bucket{" + label + ",le=\"" + http::prometheus_number(kBounds[b]) + "\"}",
             static_cast<double>(below[b]));
    }
    sample(out, std::string(name) + "_bucket{" + label + ",le=\"+Inf\"}", static_cast<double>(E));
    sample(out, std::string(name) + "_sum{" + label + "}", sum);
    sample(out, std::string(name) + "_count{" + label + "}", static_cast<double>(E));
  }
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
  counter(out, "pagoda_preemptions_total", "Running requests preempted for lack of KV blocks (recomputed, or swapped to the host tier with --preemption swap).", m.preemptions);
  counter(out, "pagoda_kv_swapped_out_blocks_total", "KV blocks put into the host tier by swap preemptions.",
          m.swapped_out_blocks);
  counter(out, "pagoda_kv_swapped_in_blocks_total", "KV blocks of swap-preempted requests loaded back on resumption.",
          m.swapped_in_blocks);
  counter(out, "pagoda_kv_swap_fallbacks_total", "Swap preemptions done by recompute (no usable host tier).",
          m.swap_fallbacks);
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
  if (!m.tiers.empty()) tier_metrics(out, m);
  if (m.n_expert > 0 && !m.expert_tokens.empty()) expert_metrics(out, m);
  return out;
}

}  // namespace pagoda::server
