// ConnectionGate: the task queue httplib hands each accepted connection to, with a limit.
//
// httplib serves a connection on one thread from its first byte to its close (keep-alive
// included), so idle or byte-at-a-time clients (slowloris) each hold a thread. The gate runs up to
// `max_connections` connections at once, each on its own thread, so hundreds of such clients
// leave the others served while they stay under the limit (threads start as connections need
// them and then stay, up to max_connections). A connection beyond the limit goes to a
// small overflow pool whose threads answer its requests with 503 (over_limit() is true there;
// HttpListener's pre-routing handler replies) and close it. When the overflow pool's queue is full
// too, the accept loop waits: new connections then wait in the listen backlog.
//
// States of a connection: queued (main or overflow) -> running -> done; `open()` counts the main
// pool's queued + running ones, which never exceeds max_connections.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::http {

class ConnectionGate {
 public:
  ConnectionGate(size_t max_connections, size_t overflow_threads);
  ~ConnectionGate();
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Runs `serve` (one connection) on a main thread, or on an overflow thread when max_connections
  // are open; blocks while the overflow queue holds kOverflowQueuePerThread x overflow_threads.
  void enqueue(std::function<void()> serve);
  // Finishes every queued connection, then joins the threads. Idempotent.
  void shutdown();

  size_t open() const;          // main pool: queued + running
  size_t rejected() const;      // connections handed to the overflow pool so far
  size_t max_connections() const { return max_connections_; }
  // True on the overflow pool's threads: the request being read is over the limit.
  static bool over_limit();

  static constexpr size_t kOverflowQueuePerThread = 16;

 private:
  struct Pool {
    std::deque<std::function<void()>> jobs;
    std::vector<std::thread> threads;
  };
  void work(Pool& pool, bool overflow);

  const size_t max_connections_;
  const size_t overflow_threads_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // a job was queued, or shutdown
  std::condition_variable room_cv_;   // a connection finished (room in a queue)
  Pool main_, overflow_;
  size_t open_ = 0;                   // main: queued + running
  size_t overflow_open_ = 0;          // overflow: queued + running
  size_t rejected_ = 0;
  bool shutdown_ = false;
};

}  // namespace pagoda::http
