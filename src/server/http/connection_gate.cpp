#include "server/http/connection_gate.h"

#include "core/check.h"

namespace pagoda::http {
namespace {
thread_local bool tl_over_limit = false;
}

ConnectionGate::ConnectionGate(size_t max_connections, size_t overflow_threads)
    : max_connections_(max_connections), overflow_threads_(overflow_threads) {
  CHECK(max_connections_ > 0 && overflow_threads_ > 0) << "ConnectionGate needs threads";
  for (size_t i = 0; i < overflow_threads_; ++i) overflow_.threads.emplace_back([this] { work(overflow_, true); });
}

ConnectionGate::~ConnectionGate() { shutdown(); }

bool ConnectionGate::over_limit() { return tl_over_limit; }

void ConnectionGate::enqueue(std::function<void()> serve) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (open_ < max_connections_) {
      ++open_;
      main_.jobs.push_back(std::move(serve));
      // Main threads start as connections need them: one per open connection at most.
      if (main_.threads.size() < open_) main_.threads.emplace_back([this] { work(main_, false); });
      break;
    }
    if (overflow_open_ < overflow_threads_ * (1 + kOverflowQueuePerThread)) {
      ++overflow_open_;
      ++rejected_;
      overflow_.jobs.push_back(std::move(serve));
      break;
    }
    room_cv_.wait(lock);
  }
  lock.unlock();
  work_cv_.notify_all();
}

void ConnectionGate::work(Pool& pool, bool overflow) {
  tl_over_limit = overflow;
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return !pool.jobs.empty() || shutdown_; });
      if (pool.jobs.empty()) return;  // shutdown, nothing left
      job = std::move(pool.jobs.front());
      pool.jobs.pop_front();
    }
    job();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --(overflow ? overflow_open_ : open_);
    }
    room_cv_.notify_all();
  }
}

void ConnectionGate::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : main_.threads) t.join();
  for (std::thread& t : overflow_.threads) t.join();
}

size_t ConnectionGate::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

size_t ConnectionGate::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

}  // namespace pagoda::http
