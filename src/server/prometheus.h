// ServingMetrics -> Prometheus text exposition format (version 0.0.4), checked by
// `promtool check metrics` in the tests.
//
// Names: pagoda_ prefix, base units (seconds, tokens, blocks), counters end in _total.
//   histograms  pagoda_time_to_first_token_seconds, pagoda_inter_token_latency_seconds,
//               pagoda_e2e_request_latency_seconds, pagoda_request_queue_time_seconds
//   counters    pagoda_prompt_tokens_total, pagoda_generation_tokens_total,
//               pagoda_requests_finished_total{reason="stop|length|abort|error"},
//               pagoda_preemptions_total, pagoda_kv_evicted_blocks_total,
//               pagoda_prefix_cache_queried_tokens_total, pagoda_prefix_cache_hit_tokens_total,
//               pagoda_engine_steps_total
//   gauges      pagoda_requests_running, pagoda_requests_waiting,
//               pagoda_kv_blocks{state="in_use|cached|free"}, pagoda_kv_blocks_capacity,
//               pagoda_kv_usage_ratio (in use / capacity)
#pragma once

#include <string>

#include "engine/serving.h"

namespace pagoda::server {

std::string prometheus_text(const engine::ServingMetrics& metrics);

}  // namespace pagoda::server
