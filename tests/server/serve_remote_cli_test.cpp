// `pagoda serve --kv-remote` as processes on loopback, Redis started on a free port
// (store/redis_test_env.h): instance B, with its own empty pool, serves a 1,000-token prompt
// that only instance A has seen with cached_tokens >= 900 from the remote tier and A's greedy
// output (one Redis server, and a 3-node Redis Cluster); Redis killed between requests, or
// never there, fails no request: a counter moves, the output equals cold, and the tier comes
// back once a health probe reaches the restarted server; `pagoda run` shares the pool too;
// concurrent requests through the pool equal the instance that computed them.
// /metrics passes promtool.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "eventually.h"
#include "pagoda_process.h"
#include "server/serve_process.h"
#include "shell.h"
#include "store/redis_test_env.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

class RemoteServe : public ServeProcess {
 public:
  explicit RemoteServe(const std::string& flags)
      : ServeProcess("serve -m " + stories_dir() + "/stories260K.gguf -c 1100 --port 0 -t 1 --kv-remote-timeout-ms 500 " +
                     flags) {}
  double remote(const std::string& counter) { return metric("pagoda_kv_remote_" + counter + "{tier=\"remote\"}"); }
};

std::vector<int32_t> long_prompt(int salt = 0) {  // 1,001 tokens (stories vocab: ids 3..511)
  std::vector<int32_t> p{1};
  for (int i = 0; i < 1000; ++i) p.push_back(3 + (i * 37 + i / 7 + salt) % 500);
  return p;
}

int64_t cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); }
int64_t from_remote(const json& r) {
  const json& by = r["usage"]["prompt_tokens_details"]["cached_tokens_by_tier"];
  return by.contains("remote") ? by["remote"].get<int64_t>() : 0;
}

// The prompt's 62 whole blocks are in Redis (write-through, acknowledged).
void wait_written(RemoteServe& s, double blocks = 62) {
  EXPECT_TRUE(eventually([&] { return s.remote("written_blocks_total") + s.remote("put_skipped_existing_total") >= blocks; }))
      << s.metrics();
}

void second_instance_reuses(const std::string& url) {
  const std::vector<int32_t> p = long_prompt();
  RemoteServe a("--kv-remote " + url);
  ASSERT_GT(a.port_, 0) << a.err();
  EXPECT_NE(a.err().find("remote tier: " + url), std::string::npos) << a.err();
  EXPECT_NE(a.err().find(": up"), std::string::npos) << a.err();
  const json cold = a.complete(p);
  EXPECT_EQ(cached(cold), 0) << cold;
  wait_written(a);
  RemoteServe b("--kv-remote " + url);
  ASSERT_GT(b.port_, 0) << b.err();
  const json warm = b.complete(p);
  EXPECT_GE(cached(warm), 900) << warm;
  EXPECT_GE(from_remote(warm), 900) << warm;
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_GE(b.remote("get_blocks_total"), 56) << b.metrics();
  EXPECT_EQ(b.metric("pagoda_kv_tier_corrupt_records_total{tier=\"remote\"}"), 0);
  const std::string m = b.metrics();
  const ShellRun promtool = run_shell("promtool check metrics 2>&1 <<'EOF'\n" + m + "EOF\n");
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out << m;
  EXPECT_EQ(a.terminate(), 0) << a.err();
  EXPECT_EQ(b.terminate(), 0) << b.err();
}

TEST(ServeRemote, SecondInstanceReusesAPrefixOnlyTheFirstComputed) {
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  second_instance_reuses(redis->url());
}

TEST(ServeRemote, SecondInstanceReusesAPrefixThroughARedisCluster) {
  auto cluster = RedisCluster::start();
  ASSERT_NE(cluster, nullptr);
  second_instance_reuses(cluster->url());
}

// Many prompts at once through the pool: instance A computes 12 prompts of 300+ tokens (three
// of them sharing a prefix), then instance B, empty, serves all 12 from 4 concurrent clients
// (the remote tier's gets of different requests interleave on its I/O thread). Every greedy
// reply of B equals A's token for token and hits the pool; afterwards neither instance holds a
// block in use or a running request.
TEST(ServeRemote, ConcurrentRequestsThroughThePoolEqualTheInstanceThatComputedThem) {
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  constexpr int kPrompts = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kPrompts; ++i) {
    std::vector<int32_t> p = long_prompt(i < 3 ? 100 : 200 + i);
    p.resize(i < 3 ? 400 + 16 * i : 300 + 7 * i);  // the first three share 400 tokens
    prompts.push_back(std::move(p));
  }
  RemoteServe a("--kv-remote " + redis->url());
  ASSERT_GT(a.port_, 0) << a.err();
  std::vector<json> cold;
  double whole_blocks = 0;
  for (const auto& p : prompts) {
    cold.push_back(a.complete(p, 12));
    whole_blocks += static_cast<double>(p.size() / 16);
  }
  wait_written(a, whole_blocks - 25 - 26);  // prompts 1 and 2 repeat 25 and 26 blocks of the one before
  RemoteServe b("--kv-remote " + redis->url() + " --max-num-seqs 4");
  ASSERT_GT(b.port_, 0) << b.err();
  std::vector<json> warm(kPrompts);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = t; i < kPrompts; i += 4) warm[i] = b.complete(prompts[i], 12);
    });
  }
  for (std::thread& c : clients) c.join();
  for (int i = 0; i < kPrompts; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(warm[i].contains("choices")) << warm[i];
    EXPECT_EQ(warm[i]["choices"][0]["text"], cold[i]["choices"][0]["text"]);
    EXPECT_GE(cached(warm[i]), static_cast<int64_t>(prompts[i].size() / 16 * 16) - 16) << warm[i];
  }
  EXPECT_EQ(b.metric("pagoda_kv_tier_corrupt_records_total{tier=\"remote\"}"), 0);
  for (RemoteServe* s : {&a, &b}) {
    EXPECT_TRUE(eventually([&] {
      return s->metric("pagoda_kv_blocks{state=\"in_use\"}") == 0 && s->metric("pagoda_requests_running") == 0;
    })) << s->metrics();
  }
  EXPECT_EQ(a.terminate(), 0) << a.err();
  EXPECT_EQ(b.terminate(), 0) << b.err();
}

TEST(ServeRemote, DeadRedisFailsNoRequestAndTheTierComesBack) {
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  RemoteServe s("--kv-remote " + redis->url());
  ASSERT_GT(s.port_, 0) << s.err();
  const json first = s.complete(long_prompt(1), 2);
  wait_written(s);
  redis->kill();
  // A prompt whose blocks would go to Redis: the writes fail, the request does not.
  const json second = s.complete(long_prompt(2), 2);
  EXPECT_EQ(second["choices"][0]["finish_reason"], "length") << second;
  EXPECT_TRUE(eventually([&] { return s.remote("errors_total") >= 1; })) << s.metrics();
  EXPECT_TRUE(eventually([&] { return s.remote("up") == 0; })) << s.metrics();
  ASSERT_TRUE(redis->restart());  // same port, empty
  // Requests drive the step loop, whose polls run the due health probes.
  int requests = 0;
  EXPECT_TRUE(eventually([&] {
    s.complete({1, 5, 6, 7}, 1);
    ++requests;
    return s.remote("up") == 1;
  }, 60)) << s.metrics();
  EXPECT_GE(s.remote("recoveries_total"), 1) << s.metrics();
  // Re-enabled: a new prompt is written through again and found by a second instance.
  const std::vector<int32_t> p = long_prompt(3);
  const json cold = s.complete(p);
  wait_written(s, 62 + 62);
  RemoteServe b("--kv-remote " + redis->url());
  ASSERT_GT(b.port_, 0) << b.err();
  const json warm = b.complete(p);
  EXPECT_GE(from_remote(warm), 900) << warm;
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_EQ(s.terminate(), 0) << s.err();
  EXPECT_EQ(b.terminate(), 0) << b.err();
}

TEST(ServeRemote, NoRedisAtStartIsAWarningAndRequestsRecompute) {
  const int port = free_loopback_port();
  RemoteServe s("--kv-remote redis://127.0.0.1:" + std::to_string(port));
  ASSERT_GT(s.port_, 0) << s.err();
  EXPECT_NE(s.err().find(": down ("), std::string::npos) << s.err();
  const json r = s.complete(long_prompt(), 2);
  EXPECT_EQ(cached(r), 0) << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r;
  EXPECT_EQ(s.remote("up"), 0) << s.metrics();
  EXPECT_GE(s.remote("probe_failures_total"), 1) << s.metrics();  // the start-up probe
  EXPECT_EQ(s.metric("pagoda_kv_tier_enabled{tier=\"remote\"}"), 0) << s.metrics();
  EXPECT_EQ(s.terminate(), 0) << s.err();
}

// `pagoda run --kv-remote`: the next process finds the prompt the first one computed, and
// generates the same tokens. (Queued writes at exit: RedisTier.PutsQueuedAtDestructionAreStillSent.)
TEST(ServeRemote, PagodaRunLeavesItsBlocksForTheNextRun) {
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  std::string prompt;
  for (int i = 0; i < 20; ++i) prompt += "Once upon a time there was a little girl named Lily who liked to play in the park ";
  const std::string cmd = std::string(PAGODA_BIN_DIR) + "/pagoda run -m " + stories_dir() + "/stories260K.gguf -p '" +
                          prompt + "' -n 2 --temp 0 --json --kv-remote " + redis->url() + " 2>/dev/null";
  const ShellRun first = run_shell(cmd);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const ShellRun second = run_shell(cmd);
  ASSERT_EQ(second.exit_code, 0) << second.out;
  const json a = json::parse(first.out), b = json::parse(second.out);
  EXPECT_EQ(a["stats"]["cached_tokens"], 0);
  EXPECT_GE(b["stats"]["cached_tokens"].get<int64_t>(), 480) << b["stats"];  // 501 tokens: 31 whole blocks
  EXPECT_EQ(a["token_ids"], b["token_ids"]);
}

TEST(ServeRemote, BadRemoteFlagsAreStartUpErrors) {
  for (const std::string flags : {"--kv-remote http://127.0.0.1:1", "--kv-remote redis://127.0.0.1:1 --no-prefix-cache",
                                  "--kv-remote redis://127.0.0.1:1 --kv-remote redis+cluster://127.0.0.1:2",
                                  "--kv-remote redis://127.0.0.1:1 --kv-remote-compress gzip"}) {
    SCOPED_TRACE(flags);
    RemoteServe s(flags);
    EXPECT_EQ(s.port_, -1);
    EXPECT_NE(s.terminate(), 0);
    EXPECT_NE(s.err().find("-kv-"), std::string::npos) << s.err();  // names the flag at fault
  }
}

}  // namespace
}  // namespace pagoda::testing
