// A real Prometheus (Debian's `prometheus`, scrape interval 1 s) scrapes the in-process server
// on stories260K; once the server is idle and Prometheus has scraped its final numbers, PromQL
// queries for the prefix-cache hit rate, KV usage and TTFT quantiles must give the values the
// server reports in /v1/kv/stats (its quantiles use Prometheus's interpolation).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

class PrometheusProcess {
 public:
  PrometheusProcess(const std::string& dir, int target_port) : port_(free_port()) {
    std::filesystem::create_directories(dir + "/data");
    std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                           << "scrape_configs:\n  - job_name: pagoda\n    static_configs:\n"
                                           << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    log_ = dir + "/prometheus.log";
    pid_ = fork();
    CHECK(pid_ >= 0);
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      const std::string config = "--config.file=" + dir + "/prometheus.yml";
      const std::string data = "--storage.tsdb.path=" + dir + "/data";
      const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
      execlp("prometheus", "prometheus", config.c_str(), data.c_str(), listen.c_str(), "--log.level=warn",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_connection_timeout(1, 0);
  }
  ~PrometheusProcess() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  // The value of an instant query with one result; nullopt when it has none (yet).
  std::optional<double> query(const std::string& promql) {
    auto res = client_->Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!res || res->status != 200) return std::nullopt;
    const json body = json::parse(res->body, nullptr, false);
    if (body.is_discarded() || body["status"] != "success" || body["data"]["result"].size() != 1) return std::nullopt;
    return std::stod(body["data"]["result"][0]["value"][1].get<std::string>());
  }
  std::string log() const { return read_file_or_empty(log_); }

 private:
  int port_;
  pid_t pid_ = -1;
  std::string log_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(RealServerTest, PrometheusQueriesAgreeWithTheServer) {
  const std::string prefix = "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
  for (int i = 0; i < 12; ++i) {  // shared prefix: hits after the first; outputs of different lengths
    auto res = post("/v1/completions", {{"prompt", prefix + std::to_string(i)}, {"max_tokens", 4 + 9 * i},
                                        {"ignore_eos", true}, {"temperature", 0}});
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
  }
  expect_idle_and_intact();
  const json stats = json::parse(client_->Get("/v1/kv/stats")->body);
  const double generated = serving_->metrics().generation_tokens;

  PrometheusProcess prometheus(::testing::TempDir() + "/pagoda-prometheus-" + std::to_string(getpid()), port_);
  // Bounded wait (Prometheus starts, then scrapes every second) for a scrape of the idle server.
  std::optional<double> scraped;
  for (int i = 0; i < 300 && scraped != generated; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    scraped = prometheus.query("pagoda_generation_tokens_total");
  }
  ASSERT_EQ(scraped, generated) << prometheus.log();

  auto near = [](std::optional<double> got, double want, const char* what) {
    ASSERT_TRUE(got.has_value()) << what;
    EXPECT_NEAR(*got, want, 1e-9 * std::max(1.0, std::fabs(want))) << what;
  };
  const double hit_rate = stats["prefix_cache"]["hit_rate"];
  EXPECT_GT(hit_rate, 0.5);
  near(prometheus.query("pagoda_prefix_cache_hit_tokens_total / pagoda_prefix_cache_queried_tokens_total"), hit_rate,
       "hit rate");
  near(prometheus.query("pagoda_kv_usage_ratio"), stats["pool"]["usage_ratio"], "KV usage");
  near(prometheus.query("pagoda_kv_blocks{state=\"cached\"} / ignoring(state) pagoda_kv_blocks_capacity"),
       stats["pool"]["cached"].get<double>() / stats["pool"]["num_blocks"].get<double>(), "cached share");
  for (const char* q : {"0.5", "0.9", "0.99"}) {
    const std::string key = std::string(q) == "0.5" ? "p50" : std::string(q) == "0.9" ? "p90" : "p99";
    near(prometheus.query(std::string("histogram_quantile(") + q + ", pagoda_time_to_first_token_seconds_bucket)"),
         stats["latency"]["ttft"][key], ("TTFT " + key).c_str());
    near(prometheus.query(std::string("histogram_quantile(") + q + ", pagoda_inter_token_latency_seconds_bucket)"),
         stats["latency"]["inter_token"][key], ("inter-token " + key).c_str());
  }
  near(prometheus.query("pagoda_time_to_first_token_seconds_count"), 12, "TTFT count");
}

}  // namespace
}  // namespace pagoda::testing
