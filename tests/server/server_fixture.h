// An HttpServer on a free loopback port in front of a FakeServingEngine, and helpers to talk to
// it (httplib client, SSE parsing, raw sockets for clients that hang up).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "fake_serving_engine.h"
#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "server/http_server.h"
#include "test_data.h"

namespace pagoda::testing {

inline std::shared_ptr<const model::Tokenizer> stories_tokenizer() {
  auto file = model::GgufFile::read(stories_dir() + "/stories260K.gguf");
  CHECK(file.is_ok()) << file.status().message();
  auto vocab = model::vocab_from_gguf(*file);
  CHECK(vocab.is_ok()) << vocab.status().message();
  auto tok = model::Tokenizer::create(std::move(vocab).value());
  CHECK(tok.is_ok()) << tok.status().message();
  return std::make_shared<const model::Tokenizer>(std::move(tok).value());
}

// The JSON payloads of an SSE body ("data: {...}" lines), and whether it ended with [DONE].
struct SseEvents {
  std::vector<nlohmann::json> chunks;
  bool done = false;
};
inline SseEvents parse_sse(const std::string& body) {
  SseEvents out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) continue;  // comments (":") and blank lines
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      out.done = true;
    } else {
      out.chunks.push_back(nlohmann::json::parse(data));
    }
  }
  return out;
}

// Sends raw bytes to 127.0.0.1:port and returns the connected socket (the caller closes it).
inline int send_raw(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  CHECK(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  CHECK(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

inline std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

class ServerTest : public ::testing::Test {
 protected:
  static constexpr int64_t kContext = 64;

  void start(server::ServerConfig config = {}, size_t max_waiting = 8,
             server::ChatFamily family = server::ChatFamily::kChatML) {
    if (!tokenizer_) tokenizer_ = stories_tokenizer();  // a test may set its own first
    engine_ = std::make_unique<FakeServingEngine>(tokenizer_, context_, max_waiting);
    engine_->start();
    config.host = "127.0.0.1";
    config.port = 0;
    config.model_name = "stories260K";
    config.limits.vocab_size = tokenizer_->vocab_size();
    config.limits.max_context = context_;
    config.limits.max_choices = 8;
    config.poll_interval_s = 0.01;
    config.unix_time = [] { return int64_t{1700000000}; };
    server::ChatTemplate chat(family, "<s>", "</s>");
    chat.set_syntax(tool_syntax_, reasoning_syntax_);
    server_ = std::make_unique<server::HttpServer>(*engine_, std::move(chat), config, logger_);
    auto port = server_->bind();
    ASSERT_TRUE(port.is_ok()) << port.status().message();
    port_ = *port;
    thread_ = std::thread([this] { server_->listen(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(30, 0);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->stop();
    if (thread_.joinable()) thread_.join();
    if (engine_ != nullptr) engine_->shutdown(false);
  }

  httplib::Result post(const std::string& path, const nlohmann::json& body, const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body.dump(), "application/json");
  }
  std::string decode(const std::vector<int32_t>& ids) const { return tokenizer_->decode(ids); }

  // Set before start(): the context, and the chat template's tool and reasoning syntaxes.
  int64_t context_ = kContext;
  model::ToolSyntax tool_syntax_ = model::ToolSyntax::kNone;
  model::ReasoningSyntax reasoning_syntax_ = model::ReasoningSyntax::kNone;
  Logger logger_{LogLevel::kWarn, stderr};
  std::shared_ptr<const model::Tokenizer> tokenizer_;
  std::unique_ptr<FakeServingEngine> engine_;
  std::unique_ptr<server::HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace pagoda::testing
