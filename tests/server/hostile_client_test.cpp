// Hostile clients against the real server (stories260K behind the continuous-batching engine and
// the HTTP front, as `pagoda serve` wires them): each one gets an answer, and none takes the
// server down, leaks blocks or starves the others (issue 12, point 3).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

// A TCP connection to the server that has sent nothing yet (the caller closes it).
int connect_only(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  CHECK(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// Everything the server sends on `fd` until it closes the connection (bounded by a 60 s
// receive timeout, a safety net).
std::string read_until_closed(int fd) {
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

json greedy(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

class HostileClientTest : public RealServerTest {
 protected:
  static constexpr int kConnections = 256;
  void configure(server::ServerConfig& c) override {
    c.http_threads = kConnections;
    c.max_body_bytes = 1 << 20;
    c.read_timeout_s = 2;
  }
  std::string text_of(const httplib::Result& r) {
    EXPECT_TRUE(r) << "no response";
    if (!r) return "";
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["choices"][0]["text"].get<std::string>();
  }
  // The server still answers an ordinary request correctly.
  void expect_served(const std::string& reference) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    EXPECT_EQ(text_of(c.Post("/v1/completions", greedy("Once upon a time", 8).dump(), "application/json")), reference);
  }
};

TEST_F(HostileClientTest, IdleAndByteAtATimeConnectionsLeaveOthersServed) {
  const std::string reference = text_of(post("/v1/completions", greedy("Once upon a time", 8)));
  // 200 connections that send nothing, 20 that send a request one byte every 10 ms (never
  // finishing its headers): together under the connection limit, each holding a thread.
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(connect_only(port_));
  std::atomic<bool> stop{false};
  std::vector<std::thread> tricklers;
  for (int i = 0; i < 20; ++i) {
    tricklers.emplace_back([&, fd = connect_only(port_)] {
      const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
      size_t sent = 0;
      while (!stop) {
        const char c = sent < head.size() ? head[sent] : 'a';
        if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
        ++sent;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      close(fd);
    });
  }
  for (int i = 0; i < 4; ++i) expect_served(reference);
  stop = true;
  for (std::thread& t : tricklers) t.join();
  for (int fd : idle) close(fd);
  expect_idle_and_intact();
}

TEST_F(HostileClientTest, SilentConnectionIsClosedAfterTheReadTimeout) {
  const int fd = connect_only(port_);
  EXPECT_EQ(read_until_closed(fd), "");  // closed by the server (read_timeout_s), nothing sent
  close(fd);
  const int half = send_raw(port_, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"pro");
  read_until_closed(half);  // a body that stops arriving: dropped too
  close(half);
  expect_idle_and_intact();
}

TEST_F(HostileClientTest, ClientThatStopsReadingAStreamDoesNotHoldItsBlocks) {
  const std::string reference = text_of(post("/v1/completions", greedy("Once upon a time", 8)));
  // A tiny receive buffer, and nothing read: the stream backs up into the server's socket.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int small = 1024;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true},
                     {"logprobs", 5}};
  const std::string req = post_request("/v1/completions", body.dump());
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  // The request ends (aborted when a write times out, or finished into the socket buffers) and
  // gives its blocks back while the client still holds the connection; others are served.
  expect_served(reference);
  ASSERT_TRUE(eventually([&] {
    const engine::ServingMetrics m = serving_->metrics();
    return m.finished_abort + m.finished_length >= 1 && m.running == 0 && m.waiting == 0;
  }, 60));
  expect_idle_and_intact();
  close(fd);
}

TEST_F(HostileClientTest, OversizedHeadersAndBodies) {
  // A header line longer than httplib's 8 KiB limit: 400, the connection closed.
  const std::string big_header = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(64 << 10, 'h') + "\r\n\r\n";
  const int fd = send_raw(port_, big_header);
  const std::string answer = read_until_closed(fd);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer.substr(0, 200);
  // A body over --max-body announced by Content-Length: 413 with an error object. A chunked body
  // (httplib would read it whole, past the limit): 411, before any of it is read.
  auto big = client_->Post("/v1/completions", std::string(2 << 20, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("larger than the server accepts"), std::string::npos) << big->body;
  // Only the first chunk is sent: the answer comes without waiting for the rest.
  const std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "10\r\n{\"prompt\": \"a\"  \r\n";
  const int cfd = send_raw(port_, chunked);
  const std::string chunked_answer = read_until_closed(cfd);
  close(cfd);
  EXPECT_EQ(chunked_answer.rfind("HTTP/1.1 411", 0), 0u) << chunked_answer.substr(0, 200);
  EXPECT_NE(chunked_answer.find("length_required"), std::string::npos) << chunked_answer.substr(0, 300);
  expect_served(text_of(post("/v1/completions", greedy("Once upon a time", 8))));
  expect_idle_and_intact();
}

TEST_F(HostileClientTest, DeeplyNestedAndHugeJson) {
  for (const std::string& field : {std::string("prompt"), std::string("stop"), std::string("x_unknown")}) {
    const std::string nested = "{\"" + field + "\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
    auto r = client_->Post("/v1/completions", nested, "application/json");
    ASSERT_TRUE(r) << field;
    EXPECT_EQ(r->status, 400) << field << ": " << r->body.substr(0, 200);
  }
  {
    const std::string objects = "{\"messages\": [{\"role\": \"user\", \"content\": " + [] {
      std::string s;
      for (int i = 0; i < 100000; ++i) s += "{\"a\":";
      s += "1";
      s += std::string(100000, '}');
      return s;
    }() + "}]}";
    auto chat = client_->Post("/v1/chat/completions", objects, "application/json");
    ASSERT_TRUE(chat);
    EXPECT_EQ(chat->status, 400) << chat->body.substr(0, 200);
  }
  // A prompt string of 900 KB (inside --max-body): tokenized, then 413 as longer than the context.
  std::string words;
  while (words.size() < 900000) words += "Once upon a time ";
  auto huge = post("/v1/completions", {{"prompt", words}});
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413) << huge->body.substr(0, 200);
  // 100000 stop strings, 100000 prompts: 400 naming the field.
  auto stops = post("/v1/completions", {{"prompt", "a"}, {"stop", std::vector<std::string>(100000, "x")}});
  EXPECT_EQ(stops->status, 400);
  auto prompts = post("/v1/completions", {{"prompt", std::vector<std::string>(100000, "x")}});
  EXPECT_EQ(prompts->status, 400);
  expect_idle_and_intact();
}

TEST_F(HostileClientTest, InvalidUtf8AnywhereGets400) {
  const std::string bad = "caf\xC3 \xFF\xFE \xED\xA0\x80";  // truncated, invalid bytes, a surrogate
  const std::vector<std::string> bodies = {
      "{\"prompt\": \"" + bad + "\"}",
      "{\"prompt\": \"a\", \"stop\": [\"" + bad + "\"]}",
      "{\"prompt\": \"a\", \"model\": \"" + bad + "\"}",
      "{\"prompt\": \"a\", \"cache_salt\": \"" + bad + "\"}",
      "{\"prompt\": \"a\", \"" + bad + "\": 1}",
      "{\"prompt\": \"a\", \"x_unknown\": [\"" + bad + "\"]}",
      "{\"prompt\": \"a\"} " + bad,
  };
  for (const std::string& body : bodies) {
    auto r = client_->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body;
  }
  auto chat = client_->Post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"" + bad + "\"}]}",
                            "application/json");
  EXPECT_EQ(chat->status, 400);
  auto role = client_->Post("/v1/chat/completions", "{\"messages\": [{\"role\": \"" + bad + "\", \"content\": \"a\"}]}",
                            "application/json");
  EXPECT_EQ(role->status, 400);
  // In a header and in the path: an answer, not a crash.
  const int fd = send_raw(port_, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: " + bad + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_until_closed(fd).rfind("HTTP/1.1 200", 0), 0u);
  close(fd);
  const int pfd = send_raw(port_, "GET /v1/\xFF\xC3 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_until_closed(pfd).rfind("HTTP/1.1 404", 0), 0u);
  close(pfd);
  expect_idle_and_intact();
}

TEST_F(HostileClientTest, ParametersAtAndPastTheirLimits) {
  const server::RequestLimits limits;  // the server's defaults (real_server.h keeps them)
  auto status = [&](json body) {
    body["temperature"] = 0;
    if (!body.contains("max_tokens")) body["max_tokens"] = 1;
    auto r = post("/v1/completions", body);
    return r ? r->status : -1;
  };
  EXPECT_EQ(status({{"prompt", "a"}, {"n", limits.max_choices}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"n", limits.max_choices + 1}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"n", 0}}), 400);
  EXPECT_EQ(status({{"prompt", std::vector<std::string>(limits.max_choices, "a")}}), 200);
  EXPECT_EQ(status({{"prompt", std::vector<std::string>(limits.max_choices + 1, "a")}}), 400);
  EXPECT_EQ(status({{"prompt", {"a", "b"}}, {"n", limits.max_choices / 2 + 1}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"logprobs", limits.max_logprobs}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"logprobs", limits.max_logprobs + 1}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"logprobs", -1}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", std::vector<std::string>(limits.max_stop, "zz")}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", std::vector<std::string>(limits.max_stop + 1, "zz")}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", json::array({std::string(100000, 'z')})}}), 200);  // a long stop string is fine
  EXPECT_EQ(status({{"prompt", "a"}, {"stop_token_ids", json::array({tokenizer_->vocab_size() - 1})}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop_token_ids", json::array({tokenizer_->vocab_size()})}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"max_tokens", kContext}}), 200);  // clipped to what the context leaves
  EXPECT_EQ(status({{"prompt", "a"}, {"max_tokens", kContext + 1}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"max_tokens", -1}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"max_tokens", 1e300}}), 400);
  EXPECT_EQ(status({{"prompt", json::array({tokenizer_->vocab_size()})}}), 400);
  EXPECT_EQ(status({{"prompt", json::array({-1})}}), 400);
  EXPECT_EQ(status({{"prompt", json::array()}}), 400);
  EXPECT_EQ(status({{"prompt", ""}}), 200);
  expect_idle_and_intact();
}

TEST_F(HostileClientTest, TokenArraysAndStringsTogether) {
  const std::vector<int32_t> ids = tokenizer_->encode("Once upon a time", true, false);
  auto both = post("/v1/completions", {{"prompt", {json("Once upon a time"), json(ids)}}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_EQ(both->status, 200) << both->body;
  const json j = json::parse(both->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  // The same prompt as text and as its token ids: the same greedy reply, in prompt order.
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["text"], j["choices"][1]["text"]);
  // A flat list mixing ids and strings is neither form: 400 naming the prompt.
  auto mixed = post("/v1/completions", {{"prompt", {json(1), json("a")}}});
  EXPECT_EQ(mixed->status, 400);
  EXPECT_EQ(json::parse(mixed->body)["error"]["param"], "prompt");
  auto nested = post("/v1/completions", {{"prompt", {json::array({json(1), json("a")})}}});
  EXPECT_EQ(nested->status, 400);
  expect_idle_and_intact();
}

class QueueFloodTest : public HostileClientTest {
 protected:
  void configure_serving(engine::ServingConfig& c) override { c.max_waiting = 8; }
};

TEST_F(QueueFloodTest, ThousandsOfRequestsAtOnceGet429OrTheirExactAnswer) {
  const std::vector<std::string> prompts = {"Once upon a time", "Tom and Lily", "The dog", "One day"};
  std::map<std::string, std::string> reference;
  const auto finished_total = [&] {
    const engine::ServingMetrics m = serving_->metrics();
    return m.finished_length + m.finished_stop;
  };
  const int64_t at_start = finished_total();
  for (const std::string& p : prompts) reference[p] = text_of(post("/v1/completions", greedy(p, 4)));
  // The step thread counts a request finished after its last bytes went out, so the last
  // reference may still be uncounted when its reply arrives: the baseline waits for all four.
  EXPECT_TRUE(eventually([&] { return finished_total() >= at_start + static_cast<int64_t>(prompts.size()); }));
  const engine::ServingMetrics before = serving_->metrics();
  // 128 clients x 16 requests, all at once, against 16 running + 8 queued.
  constexpr int kClients = 128, kEach = 16;
  std::atomic<int> ok{0}, refused{0}, wrong{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port_);
      client.set_read_timeout(120, 0);
      for (int i = 0; i < kEach; ++i) {
        const std::string& p = prompts[(c + i) % prompts.size()];
        auto r = client.Post("/v1/completions", greedy(p, 4).dump(), "application/json");
        if (!r) {
          ++other;
        } else if (r->status == 429) {
          (r->get_header_value("Retry-After") == "1" ? refused : other)++;
        } else if (r->status == 200) {
          (json::parse(r->body)["choices"][0]["text"] == reference.at(p) ? ok : wrong)++;
        } else {
          ++other;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load() + refused.load(), kClients * kEach);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0) << "the queue never filled";
  EXPECT_GT(ok.load(), 0);
  // Every accepted request finished (none lost, none aborted) and gave its blocks back.
  // The step thread counts a request finished after its last bytes went out: wait for the count.
  const auto finished = [&] {
    const engine::ServingMetrics m = serving_->metrics();
    return m.finished_length + m.finished_stop - before.finished_length - before.finished_stop;
  };
  EXPECT_TRUE(eventually([&] { return finished() >= ok.load(); }));
  const engine::ServingMetrics after = serving_->metrics();
  EXPECT_EQ(after.finished_length + after.finished_stop - before.finished_length - before.finished_stop, ok.load());
  EXPECT_EQ(after.finished_abort, before.finished_abort);
  expect_idle_and_intact();
  std::printf("queue flood: %d served, %d refused with 429\n", ok.load(), refused.load());
}

class ConnectionLimitTest : public RealServerTest {
 protected:
  static constexpr int kConnections = 8;
  void configure(server::ServerConfig& c) override { c.http_threads = kConnections; }
};

TEST_F(ConnectionLimitTest, OverTheLimitGets503AndIsClosedThenServedAgain) {
  client_.reset();  // its keep-alive connection would hold a slot
  std::vector<int> held;
  for (int i = 0; i < kConnections; ++i) held.push_back(connect_only(port_));
  // Once the held connections fill the limit, a new client gets 503 that says so.
  std::string answer;
  ASSERT_TRUE(eventually([&] {
    const int fd = send_raw(port_, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    answer = read_until_closed(fd);  // closed by the server after its read timeout
    close(fd);
    return answer.rfind("HTTP/1.1 503", 0) == 0;
  }, 60)) << answer;
  EXPECT_NE(answer.find("too_many_connections"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
  for (int fd : held) close(fd);
  // The slots free up: served again.
  ASSERT_TRUE(eventually([&] {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Get("/health");
    return r && r->status == 200;
  }, 60));
}

}  // namespace
}  // namespace pagoda::testing
