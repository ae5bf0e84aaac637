#include "store/redis_connection.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <string>

#include "silent_server.h"
#include "store/redis_test_env.h"

namespace pagoda::store {
namespace {

using testing::RedisServer;

RedisEndpoint local(int port) {
  RedisEndpoint ep;
  ep.host = "127.0.0.1";
  ep.port = port;
  return ep;
}

TEST(RedisConnection, PipelinesCommandsAndKeepsErrorRepliesUsable) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  auto conn = RedisConnection::connect(local(server->port()), {});
  ASSERT_TRUE(conn.is_ok()) << conn.status().message();
  std::vector<std::string> keys, values;
  for (int i = 0; i < 100; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back(std::string(static_cast<size_t>(i * 37), static_cast<char>('a' + i % 26)));
  }
  conn->begin_call();
  for (int i = 0; i < 100; ++i) conn->append(RedisArgv().add("SET").add(keys[i]).add(values[i]));
  conn->append(RedisArgv().add("NOSUCHCOMMAND"));
  for (int i = 0; i < 100; ++i) conn->append(RedisArgv().add("GET").add(keys[i]));
  for (int i = 0; i < 100; ++i) {
    auto r = conn->read_reply();
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(reply_text(r->get()), "OK");
  }
  auto err = conn->read_reply();
  ASSERT_TRUE(err.is_ok());
  EXPECT_TRUE(reply_is_error(err->get()));
  for (int i = 0; i < 100; ++i) {
    auto r = conn->read_reply();
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(reply_text(r->get()), values[i]);
  }
  EXPECT_FALSE(conn->broken());
}

TEST(RedisConnection, RefusedIsAnErrorValue) {
  const int port = testing::free_loopback_port();
  auto conn = RedisConnection::connect(local(port), {});
  ASSERT_FALSE(conn.is_ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(conn.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST(RedisConnection, ASilentServerTimesOutInsteadOfHanging) {
  testing::SilentServer silent;
  ASSERT_GT(silent.port(), 0);
  RedisTimeouts t;
  t.io_ms = 100;
  auto conn = RedisConnection::connect(local(silent.port()), t);  // the backlog accepts
  ASSERT_TRUE(conn.is_ok()) << conn.status().message();
  auto r = conn->command(RedisArgv().add("PING"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("timed out after 100 ms"), std::string::npos) << r.status().message();
  EXPECT_TRUE(conn->broken());
  EXPECT_FALSE(conn->command(RedisArgv().add("PING")).is_ok());  // broken stays broken, at once
}

TEST(RedisConnection, AServerThatDiesIsAFaultNotASignal) {
  auto server = RedisServer::start();
  ASSERT_NE(server, nullptr);
  block_sigpipe_in_this_thread();  // as the tier's I/O thread does
  auto conn = RedisConnection::connect(local(server->port()), {});
  ASSERT_TRUE(conn.is_ok());
  ASSERT_TRUE(conn->command(RedisArgv().add("PING")).is_ok());
  server->kill();
  // Large writes into a closed socket: EPIPE, never a SIGPIPE that kills the test.
  const std::string big(1 << 20, 'x');
  bool failed = false;
  for (int i = 0; i < 4 && !failed; ++i) failed = !conn->command(RedisArgv().add("SET").add("k").add(big)).is_ok();
  EXPECT_TRUE(failed);
  EXPECT_TRUE(conn->broken());
}

TEST(RedisConnection, AuthAndSelect) {
  auto server = RedisServer::start({"--requirepass", "pw0"});
  ASSERT_NE(server, nullptr);
  RedisEndpoint ep = local(server->port());
  {
    auto anonymous = RedisConnection::connect(ep, {});  // connects; the server then says NOAUTH
    ASSERT_TRUE(anonymous.is_ok());
    auto pong = anonymous->command(RedisArgv().add("PING"));
    ASSERT_TRUE(pong.is_ok());
    EXPECT_TRUE(reply_text(pong->get()).starts_with("NOAUTH")) << reply_text(pong->get());
  }
  ep.password = "wrong";
  EXPECT_FALSE(RedisConnection::connect(ep, {}).is_ok());
  ep.password = "pw0";
  ep.db = 3;
  auto conn = RedisConnection::connect(ep, {});
  ASSERT_TRUE(conn.is_ok()) << conn.status().message();
  ASSERT_TRUE(conn->command(RedisArgv().add("SET").add("in3").add("v")).is_ok());
  EXPECT_NE(server->cli("-a pw0 --no-auth-warning -n 3 GET in3").out.find("v"), std::string::npos);
  EXPECT_EQ(server->cli("-a pw0 --no-auth-warning -n 0 EXISTS in3").out, "0\n");
}

}  // namespace
}  // namespace pagoda::store
