// The dashboard in a real browser: the in-process server on stories260K, headless Debian
// Chromium driven by puppeteer-core (tests/npm/dashboard/check_dashboard.mjs, installed by
// `npm ci` from its lock file), under load, with and without an API key. The script checks live
// updates, that the numbers on the page equal /v1/kv/stats and /metrics once the load is over,
// and that the page talks to no other host; screenshots land in the test's temp dir (one is
// kept in docs/dashboard.png).
#include <filesystem>

#include "browser_check.h"
#include "real_server.h"

namespace pagoda::testing {
namespace {

ShellRun run_browser_check(const std::string& url, const std::string& out_dir, const std::string& key) {
  std::filesystem::create_directories(out_dir);
  return run_browser_script("check_dashboard.mjs", url + " " + out_dir + " " + key);
}

void expect_browser_ok(const ShellRun& run, const std::string& out_dir) {
  ASSERT_EQ(browser_missing(), "");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("\"ok\":true"), std::string::npos) << run.out;
  EXPECT_GT(std::filesystem::file_size(out_dir + "/dashboard-live.png"), 10000u);
  EXPECT_GT(std::filesystem::file_size(out_dir + "/dashboard-idle.png"), 10000u);
}

TEST_F(RealServerTest, DashboardInHeadlessChromiumMatchesTheApi) {
  const std::string out = ::testing::TempDir() + "/pagoda-dashboard";
  const ShellRun run = run_browser_check(url_, out, "");
  expect_browser_ok(run, out);
  expect_idle_and_intact();
}

class KeyedServerTest : public RealServerTest {
 protected:
  void configure(server::ServerConfig& c) override { c.api_keys = {"sk-dash-1234"}; }
};

TEST_F(KeyedServerTest, DashboardAsksForTheKeyAndKeepsItOutOfUrls) {
  auto page = client_->Get("/dashboard");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);  // the page itself holds no data
  EXPECT_EQ(client_->Get("/v1/kv/stats")->status, 401);
  const std::string out = ::testing::TempDir() + "/pagoda-dashboard-key";
  const ShellRun run = run_browser_check(url_, out, "sk-dash-1234");
  expect_browser_ok(run, out);
}

}  // namespace
}  // namespace pagoda::testing
