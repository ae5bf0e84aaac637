#include "router/router_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "model/text/prompt_tokens.h"
#include "server/http/errors.h"

namespace pagoda::router {

using nlohmann::json;

RouterServer::RouterServer(RouterConfig config, std::vector<WorkerAddress> workers,
                           std::shared_ptr<const model::Tokenizer> tokenizer, model::ChatTemplate chat_template,
                           const Clock& clock, const Logger& logger)
    : config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      clock_(clock),
      logger_(logger),
      listener_(std::make_unique<http::HttpListener>(
          http::ListenerConfig{config_.host, config_.port, config_.http_threads, config_.max_body_bytes}, logger)),
      started_ns_(clock.now_ns()) {
  WorkerOptions options;
  options.api_key = config_.worker_api_key;
  options.connect_timeout_s = config_.connect_timeout_s;
  options.tokenizer_probe = model::encode_prompt(*tokenizer_, model::kTokenizerProbe);
  for (WorkerAddress& a : workers) {
    const auto id = static_cast<int32_t>(workers_.size());
    workers_.push_back(std::make_unique<Worker>(std::move(a), options, clock_, logger_, &holders_, id));
  }
  worker_ttft_.resize(workers_.size());
  routes();
}

RouterServer::~RouterServer() { stop(); }

void RouterServer::start() {
  for (auto& w : workers_) {
    const Status s = w->check();
    if (!s.is_ok()) logger_.warn("router: " + w->address().url + " is not up yet: " + s.message());
  }
  health_thread_ = std::thread([this] { health_loop(); });
}

Result<int> RouterServer::bind() { return listener_->bind(); }

void RouterServer::listen() { listener_->listen(); }

void RouterServer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (health_thread_.joinable()) health_thread_.join();
  if (listener_ != nullptr) listener_->stop();
}

void RouterServer::health_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, std::chrono::duration<double>(config_.health_interval_s), [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    for (auto& w : workers_) {
      const Status s = w->check();  // a failure takes the worker down; it is logged there
      (void)s;
    }
    lock.lock();
  }
}

std::vector<Worker*> RouterServer::workers() {
  std::vector<Worker*> out;
  for (auto& w : workers_) out.push_back(w.get());
  return out;
}

RouterCounters RouterServer::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void RouterServer::count(int64_t RouterCounters::*field) {
  std::lock_guard lock(mutex_);
  ++(counters_.*field);
}

int RouterServer::choose(const RoutingRequest& request, const std::vector<bool>& tried, int64_t& overlap_blocks) {
  std::vector<WorkerLoad> loads;
  // Workers that share a namespace (the usual case) share one hashing of the prompt, and one
  // match of it against every worker's blocks through the inverted index: matched[w].
  struct Chain {
    uint64_t key = 0;
    std::vector<int64_t> matched;  // [workers]
  };
  std::vector<Chain> chains;
  int64_t block_size = 16;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = *workers_[i];
    const bool available = w.up() && !tried[i];
    int64_t overlap = 0;
    const std::optional<WorkerInfo> info = w.info();
    if (info) block_size = info->block_size;
    if (available && info && request.parsed && w.predictable()) {
      const kvcache::KvNamespace ns = info->kv_namespace(request.tenant_salt(info->salt_per_api_key));
      // One chain per (namespace, block size, hash scheme) among the workers.
      const uint64_t key = ns.key() ^ static_cast<uint64_t>(info->block_size) ^
                           static_cast<uint64_t>(reinterpret_cast<uintptr_t>(info->hash_fn()));
      auto it = std::find_if(chains.begin(), chains.end(), [&](const Chain& c) { return c.key == key; });
      if (it == chains.end()) {
        Chain c{key, std::vector<int64_t>(workers_.size())};
        holders_.match(prompt_block_hashes(request.tokens, info->block_size, ns, info->hash_fn()), c.matched);
        chains.push_back(std::move(c));
        it = chains.end() - 1;
      }
      overlap = it->matched[i];
    }
    loads.push_back(w.load(available, overlap));
  }
  RequestCost cost;
  cost.block_size = block_size;
  cost.prompt_tokens = static_cast<int64_t>(request.tokens.size());
  const int64_t total = cost.prompt_tokens + std::max<int64_t>(0, request.max_tokens) * request.num_choices;
  cost.request_blocks = (total + block_size - 1) / block_size;
  const Choice c = choose_worker(config_.policy, loads, cost, config_.overlap_weight, rr_cursor_.fetch_add(1));
  overlap_blocks = c.worker >= 0 ? loads[c.worker].overlap_blocks : 0;
  if (logger_.level() <= LogLevel::kDebug) {  // -v: each routing decision with what it weighed
    std::string line = std::string("route (") + routing_policy_name(config_.policy) + "): prompt " +
                       std::to_string(cost.prompt_tokens) + " tokens -> " +
                       (c.worker >= 0 ? workers_[static_cast<size_t>(c.worker)]->address().url : std::string("none"));
    for (size_t i = 0; i < loads.size(); ++i) {
      const WorkerLoad& l = loads[i];
      line += "; " + workers_[i]->address().url + (l.available ? "" : " (unavailable)") + ": overlap " +
              std::to_string(l.overlap_blocks) + " blocks, in flight " + std::to_string(l.in_flight) +
              ", pending prefill " + std::to_string(l.pending_prefill_tokens) + " tokens";
      if (config_.policy == RoutingPolicy::kKvAware && l.available) {
        line += ", cost " + std::to_string(kv_aware_cost(l, cost, config_.overlap_weight));
      }
    }
    logger_.debug(line);
  }
  return c.worker;
}

UpstreamRequest RouterServer::upstream_request(const httplib::Request& req, const Worker& worker) const {
  UpstreamRequest u;
  u.host = worker.address().host;
  u.port = worker.address().port;
  u.method = req.method;
  u.path = req.path;
  u.body = req.body;
  const std::string type = req.get_header_value("Content-Type");
  if (!type.empty()) u.content_type = type;
  for (const char* name : {"Authorization", "Accept", "OpenAI-Organization", "X-Request-Id"}) {
    if (req.has_header(name)) u.headers.emplace(name, req.get_header_value(name));
  }
  u.connect_timeout_s = config_.connect_timeout_s;
  u.read_timeout_s = config_.request_timeout_s;
  return u;
}

// GET routes any worker answers alike: the first up worker in turn, retried on failure.
void RouterServer::forward_simple(const httplib::Request& req, httplib::Response& res) {
  const size_t n = workers_.size();
  const uint64_t start = rr_cursor_.fetch_add(1);
  for (size_t k = 0; k < n; ++k) {
    Worker& w = *workers_[(start + k) % n];
    if (!w.up()) continue;
    Upstream up(upstream_request(req, w));
    std::string body;
    Upstream::State s;
    do {
      s = up.take(body, 1.0);
    } while (s != Upstream::State::kDone && s != Upstream::State::kFailed);
    if (s == Upstream::State::kFailed) {
      w.mark_down(up.error());
      continue;
    }
    res.status = up.status();
    res.set_content(body, up.header("Content-Type").empty() ? "application/json" : up.header("Content-Type"));
    return;
  }
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(http::error_body(503, "no worker is up"), "application/json");
}

void RouterServer::routes() {
  httplib::Server& http = listener_->server();
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, true);
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) forward_simple(req, res);
  });
  http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) forward_simple(req, res);
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    int up = 0;
    for (auto& w : workers_) up += w->up() ? 1 : 0;
    res.status = up > 0 ? 200 : 503;
    res.set_content(http::dump(json{{"status", up > 0 ? "ok" : "no worker is up"}, {"workers_up", up},
                                    {"workers", static_cast<int>(workers_.size())}}),
                    "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/router/workers", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) res.set_content(workers_json(), "application/json");
  });
  dashboard_routes();
}

std::string RouterServer::workers_json() const {
  json out = json::array();
  for (const auto& w : workers_) {
    const WorkerCounters c = w->counters();
    const WorkerLoad load = w->load(w->up(), 0);
    json j = {{"url", w->address().url},
              {"up", w->up()},
              {"predictable", w->predictable()},
              {"down_reason", w->down_reason()},
              {"indexed_blocks", w->index().num_blocks()},
              {"in_flight", load.in_flight},
              {"active_blocks", load.active_blocks},
              {"pending_prefill_tokens", load.pending_prefill_tokens},
              {"routed", c.routed},
              {"prompt_tokens", c.prompt_tokens},
              {"failed_attempts", c.failed_attempts},
              {"predicted_cached_tokens", c.predicted_cached_tokens},
              {"reported_cached_tokens", c.reported_cached_tokens}};
    if (auto info = w->info()) j["instance_id"] = info->instance_id;
    if (auto ev = w->event_stats()) {
      j["events"] = {{"synced", ev->synced},       {"next_seq", ev->next_seq},   {"batches", ev->batches_applied},
                     {"gaps", ev->gaps},           {"gaps_filled", ev->gaps_filled}, {"replays", ev->replays},
                     {"resyncs", ev->resyncs},     {"restarts", ev->restarts}};
    }
    out.push_back(std::move(j));
  }
  return http::dump(out);
}

}  // namespace pagoda::router
