// HttpListener::stop() ends listen() whenever it comes: before listen() started, or while the
// thread that calls listen() is only starting. httplib's own stop() does nothing until its accept
// loop runs, so a listen() that began just after an early stop() stayed in accept() for good
// (found as a TearDown that never returned, under ThreadSanitizer's slower start-up).
#include <gtest/gtest.h>

#include <thread>

#include "core/log.h"
#include "server/http/listener.h"

namespace pagoda::http {
namespace {

ListenerConfig any_port() {
  ListenerConfig config;
  config.port = 0;
  config.threads = 2;
  config.overflow_threads = 1;
  return config;
}

TEST(HttpListenerStop, AStopBeforeListenMakesListenReturn) {
  Logger logger(LogLevel::kWarn, stderr);
  HttpListener listener(any_port(), logger);
  ASSERT_TRUE(listener.bind().is_ok());
  listener.stop();
  listener.listen();  // would block in accept() forever without the fix
  SUCCEED();
}

TEST(HttpListenerStop, AStopRightAfterTheListenThreadStartsEndsIt) {
  Logger logger(LogLevel::kWarn, stderr);
  for (int i = 0; i < 50; ++i) {  // every interleaving of the two starts must end
    HttpListener listener(any_port(), logger);
    ASSERT_TRUE(listener.bind().is_ok());
    std::thread t([&] { listener.listen(); });
    listener.stop();
    t.join();
  }
}

}  // namespace
}  // namespace pagoda::http
