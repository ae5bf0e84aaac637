// `pagoda serve --preemption swap` as a process: one request of 4 seeded choices over a pool of
// 10 blocks (200K) cannot keep every choice's blocks at once, so choices are preempted; with swap
// (n x max_tokens = 144 fits the server's per-request cap of 160 tokens) their blocks go into the host tier (--kv-host-mem) and come back from it (the swap counters
// in /metrics and /v1/kv/stats), and the choices' texts equal those of a recompute server and of one whose pool
// holds everything (no preemption). Without a host tier, swap is a logged fallback to recompute.
#include <cstdio>

#include "pagoda_process.h"
#include "server_fixture.h"
#include "shell.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

std::string get(int port, const std::string& path) {
  return run_shell("curl -s http://127.0.0.1:" + std::to_string(port) + path).out;
}

json post(int port, const json& body) {
  const std::string cmd = "curl -s -X POST -H 'Content-Type: application/json' http://127.0.0.1:" + std::to_string(port) +
                          "/v1/completions -d '" + body.dump() + "'";
  return json::parse(run_shell(cmd).out, nullptr, /*allow_exceptions=*/false);
}

// The value of the sample line `name value` in a /metrics text (-1: absent).
double sample(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(metrics.c_str() + at + name.size() + 2);
}

struct Served {
  std::vector<std::string> texts;
  std::string metrics, log;
  json stats;  // GET /v1/kv/stats
};

Served serve_once(const std::string& flags) {
  PagodaProcess serve("serve -m " + stories_dir() + "/stories260K.gguf -c 512 --port 0 -t 1 " + flags);
  Served out;
  const int port = serve.port();
  EXPECT_GT(port, 0) << serve.err();
  if (port <= 0) return out;
  const json body = {{"prompt", "Once upon a time, there was a little girl"},
                     {"max_tokens", 36}, {"ignore_eos", true}, {"n", 4}, {"temperature", 0.9}, {"seed", 7}};
  const json reply = post(port, body);
  EXPECT_TRUE(reply.contains("choices")) << reply.dump() << serve.err();
  if (reply.contains("choices")) {
    for (const json& c : reply["choices"]) out.texts.push_back(c["text"].get<std::string>());
  }
  out.metrics = get(port, "/metrics");
  out.stats = json::parse(get(port, "/v1/kv/stats"), nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
  out.log = serve.err();
  return out;
}

TEST(ServeSwap, SwapEqualsRecomputeEqualsNoPreemption) {
  const Served whole = serve_once("--kv-cache-mem 2M");
  const Served recompute = serve_once("--kv-cache-mem 100K --preemption recompute");
  const Served swap = serve_once("--kv-cache-mem 100K --kv-host-mem 4M --preemption swap");
  EXPECT_EQ(sample(whole.metrics, "pagoda_preemptions_total"), 0) << whole.metrics;
  EXPECT_GT(sample(recompute.metrics, "pagoda_preemptions_total"), 0) << recompute.metrics;
  EXPECT_GT(sample(swap.metrics, "pagoda_preemptions_total"), 0) << swap.metrics;
  EXPECT_GT(sample(swap.metrics, "pagoda_kv_swapped_out_blocks_total"), 0) << swap.metrics;
  EXPECT_GT(sample(swap.metrics, "pagoda_kv_swapped_in_blocks_total"), 0) << swap.metrics;
  EXPECT_EQ(sample(swap.metrics, "pagoda_kv_swap_fallbacks_total"), 0);
  // /v1/kv/stats says the same.
  const json& r = swap.stats["requests"];
  EXPECT_EQ(r["preemption"], "swap") << swap.stats.dump();
  EXPECT_EQ(r["preemptions"].get<double>(), sample(swap.metrics, "pagoda_preemptions_total"));
  EXPECT_EQ(r["swap"]["swapped_out_blocks"].get<double>(), sample(swap.metrics, "pagoda_kv_swapped_out_blocks_total"));
  EXPECT_EQ(r["swap"]["swapped_in_blocks"].get<double>(), sample(swap.metrics, "pagoda_kv_swapped_in_blocks_total"));
  EXPECT_EQ(r["swap"]["fallbacks"], 0);
  EXPECT_EQ(recompute.stats["requests"]["preemption"], "recompute");
  EXPECT_EQ(recompute.stats["requests"]["swap"]["swapped_out_blocks"], 0);
  // The help text covers both modes.
  EXPECT_EQ(swap.metrics.find("recomputed later"), std::string::npos);
  EXPECT_NE(swap.metrics.find("# HELP pagoda_preemptions_total"), std::string::npos);
  ASSERT_EQ(whole.texts.size(), 4u);
  EXPECT_EQ(recompute.texts, whole.texts);
  EXPECT_EQ(swap.texts, whole.texts);
}

TEST(ServeSwap, WithoutAHostTierSwapIsALoggedFallback) {
  const Served swap = serve_once("--kv-cache-mem 100K --preemption swap");
  EXPECT_NE(swap.log.find("--preemption swap: there is no host tier"), std::string::npos) << swap.log;
  EXPECT_GT(sample(swap.metrics, "pagoda_kv_swap_fallbacks_total"), 0) << swap.metrics;
  EXPECT_EQ(swap.stats["requests"]["swap"]["fallbacks"].get<double>(), sample(swap.metrics, "pagoda_kv_swap_fallbacks_total"));
  EXPECT_EQ(swap.texts.size(), 4u);
  const ShellRun bad = run_shell(std::string(PAGODA_BIN_DIR) + "/pagoda serve -m " + stories_dir() +
                                 "/stories260K.gguf --preemption sometimes 2>&1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("--preemption"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace pagoda::testing
