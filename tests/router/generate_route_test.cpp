// The router's forwarding, against fake workers in this process whose answers the test controls
// byte by byte (the router is a real `pagoda router` process): SSE chunks pass through as they
// come, a worker that dies mid-stream ends the stream with an error event, errors pass through
// as sent, 429s are retried elsewhere, and a client that hangs up is hung up on upstream.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "router_fixture.h"

namespace pagoda::testing {
namespace {

const std::string kChunk1 = "data: {\"choices\":[{\"index\":0,\"text\":\"Once\",\"finish_reason\":null}]}\n\n";
const std::string kChunk2 =
    "data: {\"choices\":[{\"index\":0,\"text\":\" upon\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n"
    "data: [DONE]\n\n";

class FakeWorker {
 public:
  enum class Mode { kStream, kDieMidStream, kStatus };

  FakeWorker() {
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    server_.Get("/v1/kv/events", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          R"({"instance_id":"fake","model":"fake","block_hash":"pagoda-xxh64-chain-v1","block_size":16,)"
          R"("model_fingerprint":"0000000000000001","kv_format":"0000000000000001","kv_events":{"enabled":false}})",
          "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      ++requests_;
      if (mode_ == Mode::kStatus) {
        res.status = status_;
        if (status_ == 429) res.set_header("Retry-After", "7");
        res.set_content(body_, "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        sink.write(kChunk1.data(), kChunk1.size());
        {
          std::unique_lock lock(mutex_);
          cv_.wait_for(lock, std::chrono::seconds(20), [&] { return released_; });
        }
        if (mode_ == Mode::kDieMidStream) return false;  // the connection drops, as when a process dies
        // A client that left: writes fail (the router closed its upstream connection).
        for (int i = 0; i < 2000 && !hung_up_; ++i) {
          if (!sink.write(kChunk2.data(), i == 0 ? kChunk2.size() : 1)) hung_up_ = true;
          if (hang_up_expected_ && !hung_up_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          if (!hang_up_expected_) break;
        }
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeWorker() {
    release();
    server_.stop();
    thread_.join();
  }
  void set_status(int status, std::string body) {
    mode_ = Mode::kStatus;
    status_ = status;
    body_ = std::move(body);
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    cv_.notify_all();
  }
  int port() const { return port_; }

  std::atomic<Mode> mode_{Mode::kStream};
  std::atomic<int> requests_{0};
  std::atomic<bool> hung_up_{false};
  std::atomic<bool> hang_up_expected_{false};

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> status_{200};
  std::string body_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool released_ = false;
};

json streaming_request() { return {{"prompt", "Once"}, {"max_tokens", 2}, {"stream", true}}; }

class RouteTest : public ::testing::Test {
 protected:
  void start(std::vector<FakeWorker*> workers) {
    std::vector<int> ports;
    for (FakeWorker* w : workers) ports.push_back(w->port());
    router_ = start_router(ports, "--policy round-robin --health-interval 60");
    port_ = router_->port();
    ASSERT_GT(port_, 0) << router_->err();
    for (int p : ports) {
      ASSERT_TRUE(eventually([&] { return worker_state(port_, p).value("up", false); })) << router_->err();
    }
  }
  std::unique_ptr<PagodaProcess> router_;
  int port_ = 0;
};

TEST_F(RouteTest, SseChunksPassThroughAsTheyCome) {
  FakeWorker w;
  start({&w});
  bool first_before_the_rest = false;
  const StreamReply r = post_stream(port_, "/v1/completions", streaming_request(), [&](const std::string& so_far) {
    if (so_far == kChunk1) {
      first_before_the_rest = true;  // the worker cannot send more until released
      w.release();
    }
    return true;
  });
  ASSERT_TRUE(r.ok);
  EXPECT_TRUE(first_before_the_rest);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.bytes, kChunk1 + kChunk2);  // byte for byte
  EXPECT_EQ(r.content_type.rfind("text/event-stream", 0), 0u);
}

TEST_F(RouteTest, AWorkerDyingMidStreamEndsTheStreamWithAnError) {
  FakeWorker w;
  w.mode_ = FakeWorker::Mode::kDieMidStream;
  start({&w});
  const StreamReply r = post_stream(port_, "/v1/completions", streaming_request(), [&](const std::string& so_far) {
    if (so_far == kChunk1) w.release();
    return true;
  });
  EXPECT_EQ(r.status, 200);
  ASSERT_EQ(r.bytes.rfind(kChunk1, 0), 0u) << r.bytes;
  const std::vector<std::string> events = sse_data(r.bytes);
  ASSERT_EQ(events.size(), 3u) << r.bytes;
  const json error = json::parse(events[1], nullptr, false);
  ASSERT_TRUE(error.contains("error")) << events[1];
  EXPECT_NE(error["error"].value("message", "").find("failed mid-stream"), std::string::npos);
  EXPECT_EQ(events[2], "[DONE]");
  EXPECT_FALSE(worker_state(port_, w.port()).value("up", true));
  EXPECT_NE(get_text(port_, "/metrics").find("pagoda_router_broken_streams_total 1"), std::string::npos);
}

TEST_F(RouteTest, ErrorsPassThroughAsTheWorkerSentThem) {
  FakeWorker w;
  const std::string body = R"({"error":{"message":"temperature: must be between 0 and 2","type":"invalid_request_error","param":"temperature","code":null}})";
  w.set_status(400, body);
  start({&w});
  const Reply r = post(port_, "/v1/completions", json{{"prompt", "x"}, {"temperature", 9}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, body);
  EXPECT_EQ(w.requests_, 1);  // a client error is not retried
  EXPECT_NE(get_text(port_, "/metrics").find("pagoda_router_retries_total 0"), std::string::npos);
}

TEST_F(RouteTest, ABusyWorkerIsRetriedOnTheOtherAndTheLastRefusalPassesThrough) {
  FakeWorker busy, ok;
  busy.set_status(429, R"({"error":{"message":"queue full","type":"rate_limit_exceeded","param":null,"code":null}})");
  ok.set_status(200, R"({"choices":[{"index":0,"text":"hi","finish_reason":"length"}]})");
  start({&busy, &ok});
  for (int i = 0; i < 2; ++i) {  // round-robin starts each request at the first worker
    const Reply r = post(port_, "/v1/completions", json{{"prompt", "x"}});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, R"({"choices":[{"index":0,"text":"hi","finish_reason":"length"}]})");
  }
  EXPECT_EQ(busy.requests_, 2);
  EXPECT_TRUE(worker_state(port_, busy.port()).value("up", false));  // busy is not down
  EXPECT_NE(get_text(port_, "/metrics").find("pagoda_router_retries_total 2"), std::string::npos);
  ok.set_status(429, R"({"error":{"message":"also full","type":"rate_limit_exceeded","param":null,"code":null}})");
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Post("/v1/completions", json{{"prompt", "x"}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "7");
  EXPECT_NE(r->body.find("full"), std::string::npos);
}

TEST_F(RouteTest, AClientThatHangsUpIsHungUpOnUpstream) {
  FakeWorker w;
  w.hang_up_expected_ = true;
  start({&w});
  const StreamReply r = post_stream(port_, "/v1/completions", streaming_request(), [&](const std::string& so_far) {
    if (so_far == kChunk1) w.release();
    return false;  // hang up after the first chunk
  });
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(eventually([&] { return w.hung_up_.load(); }));
  EXPECT_TRUE(eventually([&] { return worker_state(port_, w.port()).value("in_flight", -1) == 0; }));
}

}  // namespace
}  // namespace pagoda::testing
