// GET /metrics of `pagoda router`: Prometheus text, names prefixed pagoda_router_.
//   counters  pagoda_router_requests_total                     generate requests received
//             pagoda_router_retries_total                      attempts after a failed one
//             pagoda_router_unroutable_requests_total          no worker could take them
//             pagoda_router_broken_streams_total               a worker failed mid-stream
//             pagoda_router_routed_requests_total{worker}      answered by each worker
//             pagoda_router_failed_attempts_total{worker}
//             pagoda_router_prompt_tokens_total{worker}        as the router tokenized them
//             pagoda_router_predicted_cached_tokens_total{worker}  what its index predicted
//             pagoda_router_reported_cached_tokens_total{worker}   what the worker's usage said
//             pagoda_router_kv_event_batches_total{worker}, ..._kv_event_gaps_total{worker},
//             ..._kv_event_replays_total{worker}, ..._kv_event_resyncs_total{worker}
//   gauges    pagoda_router_worker_up{worker}, pagoda_router_in_flight_requests{worker},
//             pagoda_router_active_blocks{worker}, pagoda_router_indexed_blocks{worker},
//             pagoda_router_kv_events_synced{worker}
//   histogram pagoda_router_time_to_first_token_seconds        until the client could see the
//             first token: a stream's first bytes, a whole answer otherwise (200s only)
#include "router/router_server.h"
#include "server/http/prometheus_text.h"

namespace pagoda::router {

std::string RouterServer::metrics_text() const {
  std::string out;
  const RouterCounters rc = counters();
  auto counter = [&](const char* name, const char* help, int64_t v) {
    http::prometheus_header(out, name, "counter", help);
    http::prometheus_sample(out, name, static_cast<double>(v));
  };
  counter("pagoda_router_requests_total", "Generate requests received.", rc.requests);
  counter("pagoda_router_pd_prefills_total", "P/D: prefills that lent their KV to a decode worker.", rc.pd_prefills);
  counter("pagoda_router_pd_prefill_failures_total", "P/D: prefills that failed (the decode worker computed the prompt).",
          rc.pd_prefill_failures);
  counter("pagoda_router_retries_total", "Attempts on another worker after one failed before anything was streamed.",
          rc.retries);
  counter("pagoda_router_unroutable_requests_total", "Requests no worker could take.", rc.unroutable);
  counter("pagoda_router_broken_streams_total", "Streams whose worker failed after they had begun.", rc.broken_streams);

  struct Row {
    std::string label;
    WorkerCounters c;
    WorkerLoad load;
    bool up;
    int64_t indexed;
    std::optional<events::SubscriberStats> ev;
  };
  std::vector<Row> rows;
  for (const auto& w : workers_) {
    rows.push_back(Row{"{worker=\"" + http::prometheus_label(w->address().url) + "\"}", w->counters(), w->load(true, 0),
                       w->up(), w->index().num_blocks(), w->event_stats()});
  }
  auto per_worker = [&](const char* name, const char* type, const char* help, auto value) {
    http::prometheus_header(out, name, type, help);
    for (const Row& r : rows) http::prometheus_sample(out, std::string(name) + r.label, static_cast<double>(value(r)));
  };
  per_worker("pagoda_router_routed_requests_total", "counter", "Requests answered by each worker.",
             [](const Row& r) { return r.c.routed; });
  per_worker("pagoda_router_failed_attempts_total", "counter", "Attempts on each worker that failed before streaming.",
             [](const Row& r) { return r.c.failed_attempts; });
  per_worker("pagoda_router_prompt_tokens_total", "counter", "Prompt tokens routed to each worker.",
             [](const Row& r) { return r.c.prompt_tokens; });
  per_worker("pagoda_router_predicted_cached_tokens_total", "counter",
             "Prompt tokens the router's index predicted each worker had cached.",
             [](const Row& r) { return r.c.predicted_cached_tokens; });
  per_worker("pagoda_router_reported_cached_tokens_total", "counter",
             "Cached prompt tokens each worker reported (usage.prompt_tokens_details.cached_tokens).",
             [](const Row& r) { return r.c.reported_cached_tokens; });
  per_worker("pagoda_router_kv_event_batches_total", "counter", "KV event batches applied.",
             [](const Row& r) { return r.ev ? r.ev->batches_applied : 0; });
  per_worker("pagoda_router_kv_event_gaps_total", "counter", "Gaps in a worker's event sequence.",
             [](const Row& r) { return r.ev ? r.ev->gaps : 0; });
  per_worker("pagoda_router_kv_event_replays_total", "counter", "Replay requests sent to a worker.",
             [](const Row& r) { return r.ev ? r.ev->replays : 0; });
  per_worker("pagoda_router_kv_event_resyncs_total", "counter", "Full resyncs from a worker's snapshot.",
             [](const Row& r) { return r.ev ? r.ev->resyncs : 0; });
  per_worker("pagoda_router_worker_up", "gauge", "1 while the worker takes requests.",
             [](const Row& r) { return r.up ? 1 : 0; });
  per_worker("pagoda_router_in_flight_requests", "gauge", "Requests the router has in flight on each worker.",
             [](const Row& r) { return r.load.in_flight; });
  per_worker("pagoda_router_active_blocks", "gauge", "KV blocks of the requests in flight on each worker (estimate).",
             [](const Row& r) { return r.load.active_blocks; });
  per_worker("pagoda_router_indexed_blocks", "gauge", "Blocks the router's index holds for each worker.",
             [](const Row& r) { return r.indexed; });
  per_worker("pagoda_router_kv_events_synced", "gauge", "1 while the worker's index follows its events.",
             [](const Row& r) { return r.ev && r.ev->synced ? 1 : 0; });
  LatencyHistogram ttft;
  {
    std::lock_guard lock(latency_mutex_);
    ttft = ttft_;
  }
  http::prometheus_histogram(out, "pagoda_router_time_to_first_token_seconds",
                             "Seconds from a request's arrival until its first token reached the client (a stream's "
                             "first bytes; a whole answer otherwise).",
                             LatencyHistogram::kBounds, ttft.buckets, ttft.sum, ttft.count);
  return out;
}

}  // namespace pagoda::router
