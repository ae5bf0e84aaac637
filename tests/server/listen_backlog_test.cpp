// The listening socket queues a burst of connections (httplib 0.11 alone listens with a backlog
// of 5, and Linux drops the SYNs beyond a full accept queue: a burst of 64 clients lost some).
// Between bind() and listen() nothing accepts, so the accept queue alone must hold them all.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <vector>

#include "fake_serving_engine.h"
#include "server/http_server.h"
#include "server_fixture.h"

namespace pagoda::testing {
namespace {

// Connects to 127.0.0.1:port, giving up after timeout_ms; returns the socket or -1.
int connect_within(int port, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{0, timeout_ms * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds connect() too
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ListenBacklog, ABurstOf64ConnectionsWaitsInTheAcceptQueue) {
  auto tokenizer = stories_tokenizer();
  FakeServingEngine engine(tokenizer, 64, 8);
  server::ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  config.model_name = "stories260K";
  config.limits.vocab_size = tokenizer->vocab_size();
  config.limits.max_context = 64;
  config.limits.max_choices = 8;
  Logger logger(LogLevel::kWarn, stderr);
  server::HttpServer server(engine, server::ChatTemplate(server::ChatFamily::kChatML, "<s>", "</s>"), config, logger);
  auto port = server.bind();  // listening, but nobody accepts until listen()
  ASSERT_TRUE(port.is_ok()) << port.status().message();
  std::vector<int> fds;
  for (int i = 0; i < 64; ++i) {
    const int fd = connect_within(*port, 500);
    if (fd >= 0) fds.push_back(fd);
  }
  EXPECT_EQ(fds.size(), 64u) << "connections beyond the listen backlog were dropped";
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace pagoda::testing
