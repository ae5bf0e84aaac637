// ConnectionGate (server/http/connection_gate.h): up to max_connections run at once, each on a
// thread of its own; the next ones run on the overflow threads, where over_limit() is true.
#include "server/http/connection_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "eventually.h"

namespace pagoda::http {
namespace {

// A job that holds its thread until released.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

TEST(ConnectionGate, BeyondTheLimitConnectionsRunOverLimit) {
  ConnectionGate gate(3, 1);
  Latch latch;
  std::atomic<int> running{0}, over{0}, under{0};
  auto job = [&] {
    (ConnectionGate::over_limit() ? over : under)++;
    ++running;
    latch.wait();
    --running;
  };
  for (int i = 0; i < 3; ++i) gate.enqueue(job);
  ASSERT_TRUE(testing::eventually([&] { return running == 3; }));  // all three at once: a thread each
  EXPECT_EQ(gate.open(), 3u);
  gate.enqueue(job);  // the fourth: over the limit
  ASSERT_TRUE(testing::eventually([&] { return running == 4; }));
  EXPECT_EQ(under.load(), 3);
  EXPECT_EQ(over.load(), 1);
  EXPECT_EQ(gate.rejected(), 1u);
  latch.release();
  ASSERT_TRUE(testing::eventually([&] { return running == 0 && gate.open() == 0; }));
  EXPECT_FALSE(ConnectionGate::over_limit());  // not on a gate thread
  // Room again: the next connection runs under the limit.
  std::atomic<bool> was_over{true};
  gate.enqueue([&] { was_over = ConnectionGate::over_limit(); });
  gate.shutdown();  // finishes what is queued, then joins
  EXPECT_FALSE(was_over.load());
  EXPECT_EQ(gate.rejected(), 1u);
}

TEST(ConnectionGate, ShutdownRunsEveryQueuedConnection) {
  std::atomic<int> done{0};
  {
    ConnectionGate gate(2, 1);
    for (int i = 0; i < 10; ++i) gate.enqueue([&] { ++done; });
  }  // the destructor shuts down
  EXPECT_EQ(done.load(), 10);
}

}  // namespace
}  // namespace pagoda::http
