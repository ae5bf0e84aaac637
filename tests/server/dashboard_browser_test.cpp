// The dashboard in a real browser: the in-process server on stories260K, headless Debian
// Chromium driven by puppeteer-core (tests/npm/dashboard/check_dashboard.mjs, installed by
// `npm ci` from its lock file), under load, with and without an API key. The script checks live
// updates, that the numbers on the page equal /v1/kv/stats and /metrics once the load is over,
// and that the page talks to no other host; screenshots land in the test's temp dir (one is
// kept in docs/dashboard.png). The unkeyed server has a host tier and an SSD tier below its
// pool: the page's tier rows and counts by tier must equal /v1/kv/stats's.
#include <stdlib.h>

#include <filesystem>

#include "browser_check.h"
#include "kvcache/disk_tier.h"
#include "kvcache/host_tier.h"
#include "real_server.h"

namespace pagoda::testing {
namespace {

ShellRun run_browser_check(const std::string& url, const std::string& out_dir, const std::string& args) {
  std::filesystem::create_directories(out_dir);
  return run_browser_script("check_dashboard.mjs", url + " " + out_dir + " " + args);
}

// As `pagoda serve --kv-host-mem 1M --kv-disk-dir DIR --kv-disk-mem 4M` wires them (tools/kv_tiers.cpp).
class TieredServerTest : public RealServerTest {
 protected:
  void attach_tiers(engine::Engine& e) override {
    std::string tmpl = ::testing::TempDir() + "pagoda-dash-disk-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    disk_dir_ = tmpl;
    kvcache::HostTierOptions h;
    h.capacity_bytes = 1 << 20;
    h.layout = e.kv_layout();
    std::vector<std::unique_ptr<kvcache::Tier>> tiers;
    tiers.push_back(kvcache::HostTier::create(h, clock_).value());
    kvcache::DiskTierOptions d;
    d.dir = disk_dir_;
    d.capacity_bytes = 4 << 20;
    d.layout = e.kv_layout();
    d.model_fingerprint = e.model_fingerprint();
    d.kv_format = e.kv_format_key();
    auto disk = kvcache::DiskTier::create(d, clock_, logger_);
    ASSERT_TRUE(disk.is_ok()) << disk.status().message();
    tiers.push_back(std::move(disk).value());
    // Both tiers write-through: every computed block reaches them whatever the pool evicts (how
    // much it evicts depends on how the browser's requests overlap, i.e. on speed), so that the
    // check's "every tier below the pool holds blocks after the load" holds deterministically.
    ASSERT_TRUE(e.attach_tiers(std::move(tiers), kvcache::OffloadMode::kWriteBack, engine::LoadCostModel::Mode::kAuto,
                               {true, true}).is_ok());
  }
  void TearDown() override {
    RealServerTest::TearDown();
    serving_.reset();  // the disk tier closes its files before they go
    if (!disk_dir_.empty()) std::filesystem::remove_all(disk_dir_);
  }
  std::string disk_dir_;
};

void expect_browser_ok(const ShellRun& run, const std::string& out_dir) {
  ASSERT_EQ(browser_missing(), "");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("\"ok\":true"), std::string::npos) << run.out;
  EXPECT_GT(std::filesystem::file_size(out_dir + "/dashboard-live.png"), 10000u);
  EXPECT_GT(std::filesystem::file_size(out_dir + "/dashboard-idle.png"), 10000u);
}

TEST_F(TieredServerTest, DashboardInHeadlessChromiumMatchesTheApi) {
  const std::string out = ::testing::TempDir() + "/pagoda-dashboard";
  const ShellRun run = run_browser_check(url_, out, "--tiers=host,disk");
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
