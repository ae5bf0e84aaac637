// The router's key check, GET /router/stats (the dashboard's data) and GET /dashboard.
//
// /router/stats: one JSON of the router's state, read once a second by the dashboard:
//   {"object":"router.stats", "uptime_s", "policy", "workers_up",
//    "requests": {total, retries, unroutable, broken_streams, in_flight},
//    "tokens": {prompt, predicted_cached, reported_cached, hit_rate},
//    "latency": {"ttft": {count, sum, p50, p90, p99}},
//    "workers": [GET /router/workers' entry + hit_rate, "ttft": {...}]}
// Its numbers are the ones /metrics prints (same counters, same buckets); hit_rate is reported
// cached tokens over routed prompt tokens (0 before any).
//
// The dashboard's files are static (no data in them) and open; the page sends the key the user
// types as an Authorization header, so a key never appears in a URL or an access log. They are
// served with a Content-Security-Policy that lets the page talk to this origin only.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "router/dashboard_assets.h"
#include "router/router_server.h"
#include "server/http/auth.h"
#include "server/http/errors.h"

namespace pagoda::router {

using nlohmann::json;

namespace {

json ttft_json(const LatencyHistogram& h) {
  return json{{"count", h.count}, {"sum", h.sum}, {"p50", h.quantile(0.5)}, {"p90", h.quantile(0.9)},
              {"p99", h.quantile(0.99)}};
}

double ratio(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

}  // namespace

bool RouterServer::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (config_.api_keys.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string key = http::bearer_token(header);
  for (const std::string& k : config_.api_keys) {
    if (!key.empty() && k == key) return true;
  }
  res.status = 401;
  res.set_content(http::error_body(401,
                                   header.empty() ? "Missing API key: send \"Authorization: Bearer KEY\""
                                                  : "Incorrect API key provided",
                                   "", "invalid_api_key"),
                  "application/json");
  return false;
}

void RouterServer::observe_ttft(size_t worker, double seconds) {
  std::lock_guard lock(latency_mutex_);
  ttft_.observe(seconds);
  worker_ttft_[worker].observe(seconds);
}

std::string RouterServer::stats_json() const {
  const RouterCounters rc = counters();
  json workers = json::parse(workers_json());
  LatencyHistogram ttft;
  std::vector<LatencyHistogram> worker_ttft;
  {
    std::lock_guard lock(latency_mutex_);
    ttft = ttft_;
    worker_ttft = worker_ttft_;
  }
  int64_t prompt = 0, predicted = 0, reported = 0, in_flight = 0, up = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    json& j = workers[i];
    // workers_json() read each worker's counters at once; these add what the dashboard needs.
    const int64_t p = j["prompt_tokens"].get<int64_t>();
    j["hit_rate"] = ratio(j["reported_cached_tokens"].get<int64_t>(), p);
    j["ttft"] = ttft_json(worker_ttft[i]);
    prompt += p;
    predicted += j["predicted_cached_tokens"].get<int64_t>();
    reported += j["reported_cached_tokens"].get<int64_t>();
    in_flight += j["in_flight"].get<int64_t>();
    up += j["up"].get<bool>() ? 1 : 0;
  }
  const json out{{"object", "router.stats"},
                 {"uptime_s", static_cast<double>(clock_.now_ns() - started_ns_) * 1e-9},
                 {"policy", routing_policy_name(config_.policy)},
                 {"workers_up", up},
                 {"requests",
                  {{"total", rc.requests},
                   {"retries", rc.retries},
                   {"unroutable", rc.unroutable},
                   {"broken_streams", rc.broken_streams},
                   {"in_flight", in_flight}}},
                 {"tokens",
                  {{"prompt", prompt},
                   {"predicted_cached", predicted},
                   {"reported_cached", reported},
                   {"hit_rate", ratio(reported, prompt)}}},
                 {"latency", {{"ttft", ttft_json(ttft)}}},
                 {"workers", workers}};
  return http::dump(out);
}

void RouterServer::dashboard_routes() {
  httplib::Server& http = listener_->server();
  http.Get("/router/stats", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    res.set_header("Cache-Control", "no-store");
    res.set_content(stats_json(), "application/json");
  });
  if (!config_.dashboard) return;
  for (const DashboardAsset& asset : dashboard_assets()) {
    http.Get(std::string(asset.path), [&asset](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(asset.body), std::string(asset.content_type));
    });
  }
}

}  // namespace pagoda::router
