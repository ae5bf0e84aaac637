// `pagoda router` over two real `pagoda serve` workers, each a process on loopback: requests go
// where their prefix is cached (the router follows each worker's KV events), greedy output is
// the same as without the router, a dead worker's requests are retried on the other, a worker
// killed mid-stream ends its stream with an error event, and a restarted worker's stale blocks
// are forgotten.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>

#include "router_fixture.h"
#include "shell.h"

namespace pagoda::testing {
namespace {

json completion(const std::string& prompt, int max_tokens = 4, bool stream = false) {
  json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  }
  return body;
}

class RouterTest : public ::testing::Test {
 protected:
  void start(const std::string& router_args = "--health-interval 60") {
    a_ = start_worker();
    b_ = start_worker();
    port_a_ = a_->port();
    port_b_ = b_->port();
    ASSERT_GT(port_a_, 0) << a_->err();
    ASSERT_GT(port_b_, 0) << b_->err();
    router_ = start_router({port_a_, port_b_}, router_args);
    port_ = router_->port();
    ASSERT_GT(port_, 0) << router_->err();
    ASSERT_TRUE(eventually([&] {
      return worker_state(port_, port_a_).value("up", false) && worker_state(port_, port_b_).value("up", false);
    })) << router_->err();
  }
  // Serves `prompt` on a worker directly, then waits until the router's index has its blocks.
  void warm(int worker_port, const std::string& prompt, int64_t min_blocks) {
    ASSERT_EQ(post(worker_port, "/v1/completions", completion(prompt)).status, 200);
    ASSERT_TRUE(eventually([&] { return worker_state(port_, worker_port).value("indexed_blocks", 0) >= min_blocks; }))
        << worker_state(port_, worker_port).dump();
  }
  int64_t routed(int worker_port) { return worker_state(port_, worker_port).value("routed", int64_t{-1}); }

  std::unique_ptr<PagodaProcess> a_, b_, router_;
  int port_a_ = 0, port_b_ = 0, port_ = 0;
};

TEST_F(RouterTest, RequestsGoWhereTheirPrefixIsCached) {
  start();
  const std::string p = story(1), q = story(2);
  warm(port_a_, p, 3);
  warm(port_b_, q, 3);
  for (int i = 0; i < 3; ++i) {
    const Reply r = post(port_, "/v1/completions", completion(p + " The end " + std::to_string(i)));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_GE(cached_tokens(r), 48) << r.body;  // served from A's cache
  }
  const Reply rq = post(port_, "/v1/completions", completion(q + " Then"));
  ASSERT_EQ(rq.status, 200);
  EXPECT_GE(cached_tokens(rq), 48);
  EXPECT_EQ(routed(port_a_), 3);
  EXPECT_EQ(routed(port_b_), 1);
  const json a = worker_state(port_, port_a_);
  EXPECT_EQ(a.value("predicted_cached_tokens", 0), a.value("reported_cached_tokens", -1)) << a.dump();
  EXPECT_GT(a.value("predicted_cached_tokens", 0), 0);
  const std::string metrics = get_text(port_, "/metrics");
  EXPECT_NE(metrics.find("pagoda_router_routed_requests_total{worker=\"http://127.0.0.1:" + std::to_string(port_a_) + "\"} 3"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("pagoda_router_retries_total 0"), std::string::npos);
  // A valid exposition (promtool is a test dependency).
  const std::string path = "/tmp/pagoda-router-metrics-" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << metrics;
  const ShellRun check = run_shell("promtool check metrics < " + path + " 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.out;
  std::remove(path.c_str());
}

TEST_F(RouterTest, GreedyOutputAndStreamsAreTheWorkersOwn) {
  start();
  const std::string p = story(3);
  const Reply direct = post(port_a_, "/v1/completions", completion(p, 24));
  ASSERT_EQ(direct.status, 200);
  const Reply routed_reply = post(port_, "/v1/completions", completion(p, 24));
  ASSERT_EQ(routed_reply.status, 200);
  EXPECT_EQ(routed_reply.j["choices"][0]["text"], direct.j["choices"][0]["text"]);
  // A stream through the router: SSE framing as the worker sent it, the usage chunk, [DONE].
  const StreamReply r = post_stream(port_, "/v1/completions", completion(p, 24, true));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type.rfind("text/event-stream", 0), 0u) << r.content_type;
  const std::vector<std::string> events = sse_data(r.bytes);
  ASSERT_GE(events.size(), 3u) << r.bytes;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) text += json::parse(events[i])["choices"][0].value("text", "");
  EXPECT_EQ(text, direct.j["choices"][0]["text"].get<std::string>());
  const json usage = json::parse(events[events.size() - 2])["usage"];
  EXPECT_EQ(usage.value("completion_tokens", 0), 24);
}

TEST_F(RouterTest, ADeadWorkersRequestIsRetriedOnTheOther) {
  start();
  const std::string p = story(4);
  warm(port_a_, p, 3);
  a_->kill_now();  // the router has not noticed yet (health checks every 60 s)
  const Reply r = post(port_, "/v1/completions", completion(p + " Again"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(routed(port_b_), 1);
  const json a = worker_state(port_, port_a_);
  EXPECT_FALSE(a.value("up", true));
  EXPECT_EQ(a.value("failed_attempts", 0), 1);
  EXPECT_NE(get_text(port_, "/metrics").find("pagoda_router_retries_total 1"), std::string::npos);
  // From now on A is not tried at all; with both gone the router answers 503 itself.
  ASSERT_EQ(post(port_, "/v1/completions", completion(p, 2, true)).status, 200);
  b_->kill_now();
  const Reply none = post(port_, "/v1/completions", completion(p));
  EXPECT_EQ(none.status, 503) << none.body;
  EXPECT_TRUE(none.j.contains("error"));
  const json health = json::parse(get_text(port_, "/health"), nullptr, false);
  ASSERT_TRUE(health.is_object());
  EXPECT_EQ(health.value("workers_up", -1), 0);
}

// A real worker SIGKILLed while it streams through the router: the client's stream ends with
// an error event and [DONE] (not a hang, not a silent cut), the router takes the worker out,
// and the next request is served by the other worker.
TEST_F(RouterTest, AWorkerKilledMidStreamEndsTheStreamWithAnErrorAndTheOtherServes) {
  start();
  const std::string p = story(6, 4);
  warm(port_a_, p, 3);  // the router sends p's continuation to A
  json body = completion(p + " Then", 360, true);
  body["ignore_eos"] = true;  // 360 tokens: far longer than the moment between a chunk and the kill
  bool killed = false;
  const StreamReply r = post_stream(port_, "/v1/completions", body, [&](const std::string& so_far) {
    if (!killed && so_far.find("data: {") != std::string::npos) {
      a_->signal(SIGSTOP);  // frozen mid-stream, then gone
      a_->kill_now();
      killed = true;
    }
    return true;
  });
  ASSERT_TRUE(killed) << r.bytes;
  EXPECT_EQ(r.status, 200);
  const std::vector<std::string> events = sse_data(r.bytes);
  ASSERT_GE(events.size(), 3u) << r.bytes;
  const json error = json::parse(events[events.size() - 2], nullptr, false);
  ASSERT_TRUE(error.is_object() && error.contains("error")) << events[events.size() - 2];
  EXPECT_NE(error["error"].value("message", "").find("failed mid-stream"), std::string::npos) << error;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_FALSE(worker_state(port_, port_a_).value("up", true));
  const Reply next = post(port_, "/v1/completions", completion(p));
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(routed(port_b_), 1);
  EXPECT_TRUE(eventually([&] { return get_json(port_b_, "/v1/kv/stats")["pool"].value("in_use", -1) == 0; }));
}

TEST_F(RouterTest, ARestartedWorkersOldBlocksAreForgotten) {
  const int fixed = free_port();
  a_ = start_worker(fixed);
  b_ = start_worker();
  port_a_ = a_->port();
  port_b_ = b_->port();
  ASSERT_EQ(port_a_, fixed) << a_->err();
  router_ = start_router({port_a_, port_b_}, "--health-interval 0.1");
  port_ = router_->port();
  ASSERT_TRUE(eventually([&] { return worker_state(port_, port_a_).value("up", false); }));
  const std::string p = story(5);
  warm(port_a_, p, 3);
  const std::string before = worker_state(port_, port_a_).value("instance_id", "");
  a_->kill_now();
  a_ = start_worker(fixed);  // a new process on the same port, with new event endpoints
  ASSERT_EQ(a_->port(), fixed) << a_->err();
  ASSERT_TRUE(eventually([&] {
    const json s = worker_state(port_, port_a_);
    return s.value("up", false) && s.value("instance_id", "") != before && s.value("indexed_blocks", -1) == 0 &&
           s.contains("events") && s["events"].value("synced", false);
  })) << worker_state(port_, port_a_).dump();
  // Its new blocks are followed again.
  warm(port_a_, story(6), 3);
}

}  // namespace
}  // namespace pagoda::testing
