// The router's dashboard in a real browser: two `pagoda serve` workers on stories260K with KV
// events, a third worker address where nothing listens (shown down), and `pagoda router
// --api-key` over them, each a process on loopback; headless Debian Chromium driven by
// puppeteer-core (tests/npm/dashboard/check_router_dashboard.mjs) under load through the router.
// The script checks live updates, that the numbers on the page equal /router/stats and /metrics
// once the load is over, the key flow, and that the page talks to no other host; screenshots
// land in the test's temp dir (one is kept in docs/router-dashboard.png).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>

#include "browser_check.h"
#include "router_fixture.h"

namespace pagoda::testing {
namespace {

// A loopback port nothing listens on (bound, then closed: connections to it are refused).
int closed_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  CHECK(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(RouterDashboardBrowser, LiveInHeadlessChromiumAndEqualToTheApi) {
  ASSERT_EQ(browser_missing(), "");
  auto a = start_worker();
  auto b = start_worker();
  const int port_a = a->port(), port_b = b->port();
  ASSERT_GT(port_a, 0) << a->err();
  ASSERT_GT(port_b, 0) << b->err();
  const std::string key = "sk-router-dash-1";
  auto router = start_router({port_a, port_b, closed_port()}, "--api-key " + key);
  const int port = router->port();
  ASSERT_GT(port, 0) << router->err();
  auto synced = [&](int worker_port) {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Get("/router/workers", httplib::Headers{{"Authorization", "Bearer " + key}});
    if (!r || r->status != 200) return false;
    for (const json& w : json::parse(r->body, nullptr, false)) {
      if (w.value("url", "") == "http://127.0.0.1:" + std::to_string(worker_port)) {
        return w.value("up", false) && w.contains("events") && w["events"].value("synced", false);
      }
    }
    return false;
  };
  ASSERT_TRUE(eventually([&] { return synced(port_a) && synced(port_b); }, 60)) << router->err();

  const std::string out = ::testing::TempDir() + "/pagoda-router-dashboard";
  std::filesystem::create_directories(out);
  const ShellRun run = run_browser_script("check_router_dashboard.mjs",
                                          "http://127.0.0.1:" + std::to_string(port) + " " + out + " " + key);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("\"ok\":true"), std::string::npos) << run.out;
  EXPECT_GT(std::filesystem::file_size(out + "/router-dashboard-live.png"), 10000u);
  EXPECT_GT(std::filesystem::file_size(out + "/router-dashboard-idle.png"), 10000u);
  EXPECT_EQ(router->terminate(), 0) << router->err();
}

}  // namespace
}  // namespace pagoda::testing
