// The router's own data and page, against fake workers in this process (the router is a real
// `pagoda router` process): GET /router/stats counts what happened (requests, retries, failed
// attempts, cached tokens, TTFT per worker and over all) with the numbers /metrics prints; with
// --api-key, /v1 and /router routes need a key (forwarded to the worker) while /dashboard,
// /health and /metrics stay open; --no-dashboard turns the page off. And the TTFT histogram's
// quantiles are PromQL's.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "router/latency_histogram.h"
#include "router_fixture.h"

namespace pagoda::testing {
namespace {

// Answers every completion with a fixed status and body; remembers the Authorization it saw.
class FixedWorker {
 public:
  FixedWorker(int status, std::string body) : status_(status), body_(std::move(body)) {
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    server_.Get("/v1/kv/events", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          R"({"instance_id":"fake","model":"fake","block_hash":"pagoda-xxh64-chain-v1","block_size":16,)"
          R"("model_fingerprint":"0000000000000001","kv_format":"0000000000000001","kv_events":{"enabled":false}})",
          "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ++requests_;
      {
        std::lock_guard lock(mutex_);
        authorization_ = req.get_header_value("Authorization");
      }
      res.status = status_;
      res.set_content(body_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FixedWorker() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string authorization() {
    std::lock_guard lock(mutex_);
    return authorization_;
  }
  std::atomic<int> requests_{0};

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  const int status_;
  const std::string body_;
  std::mutex mutex_;
  std::string authorization_;
};

const std::string kAnswer =
    R"({"choices":[{"index":0,"text":"hi","finish_reason":"length"}],)"
    R"("usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}})";
const std::string kBusy = R"({"error":{"message":"queue full","type":"rate_limit_exceeded","param":null,"code":null}})";

std::map<std::string, double> metrics(int port) {
  std::map<std::string, double> out;
  const std::string text = get_text(port, "/metrics");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

class RouterDashboardTest : public ::testing::Test {
 protected:
  void start(const std::vector<int>& ports, const std::string& extra) {
    router_ = start_router(ports, "--policy round-robin --health-interval 60 " + extra);
    port_ = router_->port();
    ASSERT_GT(port_, 0) << router_->err();
  }
  httplib::Result get(const std::string& path, const std::string& key = "") {
    httplib::Client c("127.0.0.1", port_);
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    return c.Get(path.c_str(), headers);
  }
  std::unique_ptr<PagodaProcess> router_;
  int port_ = 0;
};

TEST_F(RouterDashboardTest, StatsCountWhatHappenedAsMetricsDo) {
  FixedWorker busy(429, kBusy), ok(200, kAnswer);
  start({busy.port(), ok.port()}, "");
  for (int p : {busy.port(), ok.port()}) {
    ASSERT_TRUE(eventually([&] { return worker_state(port_, p).value("up", false); })) << router_->err();
  }
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post(port_, "/v1/completions", json{{"prompt", "Once upon a time"}}).status, 200);
  const json s = get_json(port_, "/router/stats");
  ASSERT_TRUE(s.is_object()) << get_text(port_, "/router/stats");
  EXPECT_EQ(s["object"], "router.stats");
  EXPECT_EQ(s["policy"], "round-robin");
  EXPECT_EQ(s["workers_up"], 2);
  EXPECT_GE(s["uptime_s"].get<double>(), 0.0);
  EXPECT_EQ(s["requests"]["total"], 3);
  EXPECT_EQ(s["requests"]["in_flight"], 0);
  EXPECT_EQ(s["requests"]["unroutable"], 0);
  const int retries = s["requests"]["retries"].get<int>();
  EXPECT_EQ(retries, busy.requests_.load());  // each refusal was retried on the other worker
  EXPECT_GE(retries, 1);
  ASSERT_EQ(s["workers"].size(), 2u);
  const json& wb = s["workers"][0];
  const json& wo = s["workers"][1];
  EXPECT_EQ(wb["failed_attempts"], busy.requests_.load());
  EXPECT_EQ(wb["routed"], 0);
  EXPECT_EQ(wb["ttft"]["count"], 0);
  EXPECT_EQ(wo["routed"], 3);
  EXPECT_EQ(wo["reported_cached_tokens"], 3 * 32);
  const int64_t prompt = wo["prompt_tokens"].get<int64_t>();
  ASSERT_GT(prompt, 0);  // as the router tokenized them
  EXPECT_DOUBLE_EQ(wo["hit_rate"].get<double>(), 96.0 / static_cast<double>(prompt));
  EXPECT_EQ(s["tokens"]["reported_cached"], 96);
  EXPECT_EQ(s["tokens"]["prompt"], prompt);
  EXPECT_DOUBLE_EQ(s["tokens"]["hit_rate"].get<double>(), 96.0 / static_cast<double>(prompt));
  EXPECT_EQ(s["latency"]["ttft"]["count"], 3);  // every answered request, on the worker that answered
  EXPECT_EQ(wo["ttft"]["count"], 3);
  EXPECT_GT(s["latency"]["ttft"]["sum"].get<double>(), 0.0);
  EXPECT_GT(s["latency"]["ttft"]["p50"].get<double>(), 0.0);

  // The same numbers on /metrics.
  auto m = metrics(port_);
  const std::string lb = "{worker=\"http://127.0.0.1:" + std::to_string(busy.port()) + "\"}";
  const std::string lo = "{worker=\"http://127.0.0.1:" + std::to_string(ok.port()) + "\"}";
  EXPECT_EQ(m["pagoda_router_requests_total"], 3);
  EXPECT_EQ(m["pagoda_router_retries_total"], retries);
  EXPECT_EQ(m["pagoda_router_failed_attempts_total" + lb], busy.requests_.load());
  EXPECT_EQ(m["pagoda_router_routed_requests_total" + lo], 3);
  EXPECT_EQ(m["pagoda_router_prompt_tokens_total" + lo], prompt);
  EXPECT_EQ(m["pagoda_router_reported_cached_tokens_total" + lo], 96);
  EXPECT_EQ(m["pagoda_router_time_to_first_token_seconds_count"], 3);
  EXPECT_EQ(m["pagoda_router_time_to_first_token_seconds_bucket{le=\"+Inf\"}"], 3);
  EXPECT_DOUBLE_EQ(m["pagoda_router_time_to_first_token_seconds_sum"], s["latency"]["ttft"]["sum"].get<double>());
}

TEST_F(RouterDashboardTest, KeysGuardTheDataNotThePage) {
  FixedWorker ok(200, kAnswer);
  start({ok.port()}, "--api-key sk-router-1 --api-key sk-router-2");
  ASSERT_TRUE(eventually([&] {
    auto r = get("/router/workers", "sk-router-1");
    return r && r->status == 200 && json::parse(r->body, nullptr, false)[0].value("up", false);
  })) << router_->err();
  auto page = get("/dashboard");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("/dashboard/router.js"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  for (const char* asset : {"/dashboard/router.js", "/dashboard/router.css", "/dashboard/dashboard.css"}) {
    auto r = get(asset);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << asset;
    EXPECT_GT(r->body.size(), 200u) << asset;
  }
  EXPECT_EQ(get("/health")->status, 200);
  EXPECT_EQ(get("/metrics")->status, 200);
  EXPECT_EQ(get("/router/stats")->status, 401);
  EXPECT_EQ(get("/router/stats", "sk-wrong")->status, 401);
  EXPECT_EQ(get("/router/workers")->status, 401);
  EXPECT_EQ(get("/v1/models")->status, 401);
  auto stats = get("/router/stats", "sk-router-2");
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->status, 200);
  EXPECT_EQ(json::parse(stats->body)["requests"]["total"], 0);

  EXPECT_EQ(post(port_, "/v1/completions", json{{"prompt", "x"}}).status, 401);
  EXPECT_EQ(ok.requests_, 0);  // refused by the router itself
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Post("/v1/completions", httplib::Headers{{"Authorization", "Bearer sk-router-1"}},
                  json{{"prompt", "x"}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(ok.authorization(), "Bearer sk-router-1");  // forwarded as the client sent it
  EXPECT_EQ(json::parse(get("/router/stats", "sk-router-1")->body)["requests"]["total"], 1);
}

TEST_F(RouterDashboardTest, NoDashboardTurnsThePageOff) {
  FixedWorker ok(200, kAnswer);
  start({ok.port()}, "--no-dashboard");
  EXPECT_EQ(get("/dashboard")->status, 404);
  EXPECT_EQ(get("/dashboard/router.js")->status, 404);
  EXPECT_EQ(get("/router/stats")->status, 200);  // the data stays, like /router/workers
}

TEST(LatencyHistogram, QuantilesArePromQLs) {
  router::LatencyHistogram h;
  EXPECT_EQ(h.quantile(0.5), 0.0);
  h.observe(0.003);
  h.observe(0.004);
  h.observe(0.02);
  h.observe(0.02);
  EXPECT_EQ(h.count, 4);
  EXPECT_DOUBLE_EQ(h.sum, 0.047);
  EXPECT_EQ(h.buckets[2], 2);  // (0.0025, 0.005]
  EXPECT_EQ(h.buckets[4], 2);  // (0.01, 0.025]
  // histogram_quantile(0.5): rank 2 ends the (0.0025, 0.005] bucket.
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 0.005);
  // 0.99: rank 3.96, 1.96 of the 2 in (0.01, 0.025].
  EXPECT_NEAR(h.quantile(0.99), 0.01 + 0.015 * 0.98, 1e-12);
  h.observe(100);
  h.observe(100);
  h.observe(100);
  h.observe(100);
  h.observe(100);
  EXPECT_EQ(h.buckets.back(), 5);
  EXPECT_DOUBLE_EQ(h.quantile(0.99), 30.0);  // the +Inf bucket answers the highest finite bound
  h.observe(0.001);  // a bound belongs to its own bucket (le)
  EXPECT_EQ(h.buckets[0], 1);
}

}  // namespace
}  // namespace pagoda::testing
