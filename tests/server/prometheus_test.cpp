// The /metrics exposition: exact lines for known numbers, and `promtool check metrics` accepts it.
#include "shell.h"
#include "server/prometheus.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "server_fixture.h"

namespace pagoda::testing {
namespace {

struct Promtool {
  int exit_code = -1;
  std::string output;
};

// Runs `promtool check metrics` on the text (promtool is a required test dependency).
Promtool promtool_check(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/pagoda-metrics-" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << text;
  const ShellRun run = run_shell("promtool check metrics < " + path + " 2>&1");
  return Promtool{run.exit_code, run.out};
}

engine::ServingMetrics sample_metrics() {
  engine::ServingMetrics m;
  m.prompt_tokens = 120;
  m.generation_tokens = 345;
  m.finished_stop = 3;
  m.finished_length = 2;
  m.finished_abort = 1;
  m.preemptions = 4;
  m.evicted_blocks = 5;
  m.prefix_queried_tokens = 100;
  m.pins = 2;
  m.kv_blocks_pinned = 7;
  m.pins_expired = 3;
  m.prefix_hit_tokens = 64;
  m.steps = 77;
  m.running = 2;
  m.waiting = 1;
  m.kv_blocks_total = 100;
  m.kv_blocks_in_use = 25;
  m.kv_blocks_cached = 10;
  m.kv_blocks_free = 65;
  m.ttft.buckets[0] = 1;   // <= 0.001
  m.ttft.buckets[3] = 2;   // (0.005, 0.01]
  m.ttft.buckets[14] = 1;  // > 30
  m.ttft.sum = 40.03;
  m.ttft.count = 4;
  return m;
}

TEST(Prometheus, ExpositionHasTheNumbers) {
  const std::string text = server::prometheus_text(sample_metrics());
  for (const char* line : {
           "# TYPE pagoda_time_to_first_token_seconds histogram\n",
           "pagoda_time_to_first_token_seconds_bucket{le=\"0.001\"} 1\n",
           "pagoda_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
           "pagoda_time_to_first_token_seconds_bucket{le=\"0.01\"} 3\n",
           "pagoda_time_to_first_token_seconds_bucket{le=\"30\"} 3\n",
           "pagoda_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n",
           "pagoda_time_to_first_token_seconds_sum 40.03\n",
           "pagoda_time_to_first_token_seconds_count 4\n",
           "pagoda_inter_token_latency_seconds_count 0\n",
           "pagoda_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 0\n",
           "pagoda_prompt_tokens_total 120\n",
           "pagoda_generation_tokens_total 345\n",
           "pagoda_requests_finished_total{reason=\"stop\"} 3\n",
           "pagoda_requests_finished_total{reason=\"abort\"} 1\n",
           "pagoda_preemptions_total 4\n",
           "pagoda_kv_evicted_blocks_total 5\n",
           "pagoda_prefix_cache_queried_tokens_total 100\n",
           "pagoda_prefix_cache_hit_tokens_total 64\n",
           "pagoda_requests_running 2\n",
           "pagoda_requests_waiting 1\n",
           "pagoda_kv_blocks{state=\"in_use\"} 25\n",
           "pagoda_kv_blocks{state=\"cached\"} 10\n",
           "pagoda_kv_blocks{state=\"free\"} 65\n",
           "pagoda_kv_usage_ratio 0.25\n",
           "pagoda_kv_pins 2\n",
           "pagoda_kv_pinned_blocks 7\n",
           "pagoda_kv_pins_expired_total 3\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

TEST(Prometheus, PromtoolAcceptsTheExposition) {
  const Promtool check = promtool_check(server::prometheus_text(sample_metrics()));
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(check.output, "") << "lint findings";
}

TEST(Prometheus, PromtoolRejectsABrokenExposition) {  // the check above can fail
  const Promtool check = promtool_check("# TYPE pagoda_x counter\npagoda_x{le=} one\n");
  EXPECT_NE(check.exit_code, 0) << check.output;
}

TEST_F(ServerTest, ScrapedMetricsPassPromtool) {
  start();
  ASSERT_EQ(post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 3}})->status, 200);
  auto r = client_->Get("/metrics");
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("pagoda_generation_tokens_total 3\n"), std::string::npos) << r->body;
  const Promtool check = promtool_check(r->body);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(check.output, "");
}

}  // namespace
}  // namespace pagoda::testing
