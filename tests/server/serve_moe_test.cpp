// A mixture-of-experts model served by `pagoda serve`: /metrics shows each MoE layer's routed
// tokens and the histogram of its experts' load (promtool accepts it), /v1/moe/experts the
// counts themselves (k experts per token in every MoE layer, none in the dense one before), the
// dashboard's expert panel in headless Chromium, and a dense model answers 404 there.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "browser_check.h"
#include "serve_process.h"
#include "shell.h"
#include "test_data.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

TEST(ServeMoe, ExpertLoadInMetricsAndJson) {
  const std::string path = "/tmp/pagoda-serve-moe-" + std::to_string(getpid()) + ".gguf";
  const ShellRun made = run_shell(std::string(PAGODA_BIN_DIR) + "/pagoda make-model --shape tiny-dsv3moe --dtype f32 -o " +
                                  path + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  ServeProcess serve("serve -m " + path + " --port 0 -t 1 --no-dashboard");
  ASSERT_GT(serve.port_, 0) << serve.err();
  const json done = serve.complete({1, 5, 9, 200, 17, 33, 64}, 5);
  ASSERT_TRUE(done.contains("usage"));
  const int64_t tokens = done["usage"]["prompt_tokens"].get<int64_t>() + done["usage"]["completion_tokens"].get<int64_t>();

  httplib::Client c("127.0.0.1", serve.port_);
  auto r = c.Get("/v1/moe/experts");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  const json load = json::parse(r->body);
  EXPECT_EQ(load["experts"], 8);
  EXPECT_EQ(load["experts_per_token"], 2);
  ASSERT_EQ(load["layers"].size(), 2u);  // layers 1 and 2: layer 0 is dense
  EXPECT_EQ(load["layers"][0]["layer"], 1);
  for (const json& layer : load["layers"]) {
    int64_t routed = 0, used = 0;
    for (const json& n : layer["tokens"]) routed += n.get<int64_t>(), used += n.get<int64_t>() > 0 ? 1 : 0;
    // Every token fed runs 2 experts of each MoE layer (the last generated token is never fed).
    EXPECT_EQ(routed, 2 * (tokens - 1)) << layer.dump();
    EXPECT_GE(used, 2);
  }

  const std::string metrics = serve.metrics();
  EXPECT_NE(metrics.find("pagoda_moe_routed_tokens_total{layer=\"1\"} " + std::to_string(2 * (tokens - 1)) + "\n"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("pagoda_moe_expert_load_ratio_bucket{layer=\"2\",le=\"+Inf\"} 8\n"), std::string::npos);
  const std::string sum = "pagoda_moe_expert_load_ratio_sum{layer=\"2\"} ";  // shares of an even spread: E
  ASSERT_NE(metrics.find(sum), std::string::npos) << metrics;
  EXPECT_NEAR(std::atof(metrics.c_str() + metrics.find(sum) + sum.size()), 8.0, 1e-9);
  EXPECT_EQ(metrics.find("layer=\"0\""), std::string::npos);
  const ShellRun promtool = run_shell("promtool check metrics 2>&1 <<'EOF'\n" + metrics + "EOF\n");
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out;
  std::remove(path.c_str());
}

// The dashboard's expert panel in headless Chromium equals /v1/moe/experts
// (tests/npm/dashboard/check_experts.mjs).
TEST(ServeMoe, DashboardShowsTheExpertLoad) {
  ASSERT_EQ(browser_missing(), "");
  const std::string path = "/tmp/pagoda-serve-moe-dash-" + std::to_string(getpid()) + ".gguf";
  const ShellRun made = run_shell(std::string(PAGODA_BIN_DIR) + "/pagoda make-model --shape tiny-dsv2moe --dtype f32 -o " +
                                  path + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  ServeProcess serve("serve -m " + path + " --port 0 -t 1");
  ASSERT_GT(serve.port_, 0) << serve.err();
  const std::string out = ::testing::TempDir() + "/pagoda-dashboard-experts";
  std::filesystem::create_directories(out);
  const ShellRun run = run_browser_script("check_experts.mjs", "http://127.0.0.1:" + std::to_string(serve.port_) + " " + out);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("\"ok\":true"), std::string::npos) << run.out;
  EXPECT_GT(std::filesystem::file_size(out + "/dashboard-experts.png"), 10000u);
  std::remove(path.c_str());
}

TEST(ServeMoe, ADenseModelHasNoExpertLoad) {
  ServeProcess serve("serve -m " + stories_dir() + "/stories260K.gguf --port 0 -t 1 --no-dashboard");
  ASSERT_GT(serve.port_, 0) << serve.err();
  httplib::Client c("127.0.0.1", serve.port_);
  auto r = c.Get("/v1/moe/experts");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  EXPECT_NE(r->body.find("no mixture-of-experts layers"), std::string::npos) << r->body;
  EXPECT_EQ(serve.metrics().find("pagoda_moe_"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::testing
