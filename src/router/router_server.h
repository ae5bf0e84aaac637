// RouterServer: `pagoda router`, an OpenAI-compatible front over several `pagoda serve`
// workers that sends each request where its prompt's KV already is.
//
//   POST /v1/completions, /v1/chat/completions   tokenized and hashed as the workers do
//                                                (routing_request.h), placed by the policy
//                                                (policy.h), forwarded; SSE passes through
//                                                unbuffered, errors pass through as sent
//   GET  /v1/models, /v1/models/{id}             forwarded to an up worker
//   GET  /health                                 200 while a worker is up, else 503
//   GET  /metrics                                the router's Prometheus text (router_metrics.cpp)
//   GET  /router/workers                         each worker's state (JSON)
//   GET  /router/stats                           the router's counters, TTFT and every worker's
//                                                state in one JSON (router_dashboard.cpp)
//   GET  /dashboard (+ its assets)               the live router dashboard, polling /router/stats
//                                                (off with RouterConfig::dashboard = false)
//
// Keys: with api_keys set, /v1/* and /router/* answer 401 to a request without one of them
// (Authorization: Bearer KEY); the key is still forwarded, so workers given the same keys (and
// salt_per_api_key) see the caller's own. Without, the router checks nothing and the workers
// decide. /health, /metrics and the dashboard's static files (no data in them) are open.
//
// Retries: an attempt that fails before anything reached the client (connection refused or
// reset, a 429 or 5xx status, a stream that breaks before its first byte) is retried on the
// next best worker not tried yet, up to max_retries times; one that fails later ends the
// stream with an error event. A worker that cannot be reached is taken down at once.
//
// Threads: httplib's pool answers clients (one Upstream thread per forwarded request); the
// health thread checks every worker each health_interval_s; each worker's subscriber thread
// follows its events.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"
#include "events/holder_index.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "router/latency_histogram.h"
#include "router/policy.h"
#include "router/routing_request.h"
#include "router/upstream.h"
#include "router/worker.h"
#include "server/http/listener.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace pagoda::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port
  RoutingPolicy policy = RoutingPolicy::kKvAware;
  double overlap_weight = 1.0;     // kv-aware: weight of prefill blocks against decode blocks
  int max_retries = 2;
  double health_interval_s = 1.0;
  double connect_timeout_s = 2.0;
  double request_timeout_s = 600;  // between bytes from a worker
  double poll_interval_s = 0.05;   // client checks while waiting on a worker
  std::string worker_api_key;      // for the router's own calls to workers
  int http_threads = 256;
  size_t max_body_bytes = 8u << 20;
  std::vector<std::string> api_keys;  // clients' keys the router itself checks (empty: none)
  bool dashboard = true;           // GET /dashboard
  // P/D disaggregation (router/pd_prefill.cpp): each generate request runs first on a prefill
  // worker (round-robin, max_tokens 1, kv_transfer_params {"do_remote_decode": true}), then on a
  // decode worker (the workers above) with the prefill's kv_transfer_params. A prefill that
  // fails sends the request to the decode worker unchanged (it computes the prompt itself).
  std::vector<WorkerAddress> prefill_workers;
};

struct RouterCounters {
  int64_t requests = 0;            // generate requests received
  int64_t retries = 0;             // attempts after a failed one
  int64_t unroutable = 0;          // answered by the router itself: no worker could take them
  int64_t broken_streams = 0;      // a worker failed after the stream had begun
  int64_t pd_prefills = 0;         // P/D: prefills that lent their KV
  int64_t pd_prefill_failures = 0; // P/D: prefills that failed (the decode worker computed)
};

class RouterServer {
 public:
  RouterServer(RouterConfig config, std::vector<WorkerAddress> workers,
               std::shared_ptr<const model::Tokenizer> tokenizer, model::ChatTemplate chat_template,
               const Clock& clock, const Logger& logger);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // Checks every worker once (so routing starts informed) and starts the health thread. Errors:
  // none; a worker that is down now is retried by the health thread.
  void start();
  Result<int> bind();
  void listen();  // blocks until stop()
  void stop();

  std::vector<Worker*> workers();
  RouterCounters counters() const;
  std::string metrics_text() const;  // router_metrics.cpp
  std::string stats_json() const;    // GET /router/stats (router_dashboard.cpp)

 private:
  struct Attempt;
  void routes();
  void health_loop();
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void forward_simple(const httplib::Request& req, httplib::Response& res);
  // The best worker for the request among those not tried; -1 when none is up.
  int choose(const RoutingRequest& request, const std::vector<bool>& tried, int64_t& overlap_blocks);
  UpstreamRequest upstream_request(const httplib::Request& req, const Worker& worker) const;
  // P/D: the body for the decode worker (the request plus the prefill's kv_transfer_params),
  // or nullopt when the prefill failed (then the request goes unchanged).
  std::optional<std::string> prefill_remotely(const httplib::Request& req);
  std::atomic<uint64_t> prefill_cursor_{0};
  void count(int64_t RouterCounters::*field);
  std::string workers_json() const;
  // router_dashboard.cpp: the key check (false: res holds the 401), /router/stats and /dashboard.
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  void dashboard_routes();
  // Time until the client could see the first token (a stream's first bytes, or a whole answer).
  void observe_ttft(size_t worker, double seconds);

  RouterConfig config_;
  // Which workers hold each block hash (fed by the workers' indexes; declared first so that it
  // outlives them): choose() matches a prompt against all workers at once through it.
  events::HolderIndex holders_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<const model::Tokenizer> tokenizer_;
  model::ChatTemplate chat_template_;
  const Clock& clock_;
  const Logger& logger_;
  std::unique_ptr<http::HttpListener> listener_;
  std::atomic<uint64_t> rr_cursor_{0};

  mutable std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  RouterCounters counters_;
  std::thread health_thread_;

  const int64_t started_ns_;
  mutable std::mutex latency_mutex_;  // guards what follows
  LatencyHistogram ttft_;             // every worker's
  std::vector<LatencyHistogram> worker_ttft_;  // [workers_.size()]
};

}  // namespace pagoda::router
