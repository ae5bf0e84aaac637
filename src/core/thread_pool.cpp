#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>

#include "core/check.h"

namespace pagoda {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
constexpr int kSpinIterations = 1 << 16;
}  // namespace

int ThreadPool::hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  CHECK_GE(num_threads, 1);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_range(int thread_index) {
  int64_t n = job_n_;
  int64_t grain = job_grain_;
  int64_t units = (n + grain - 1) / grain;
  int64_t per = units / num_threads_;
  int64_t extra = units % num_threads_;
  int64_t first = thread_index * per + std::min<int64_t>(thread_index, extra);
  int64_t count = per + (thread_index < extra ? 1 : 0);
  int64_t begin = std::min(n, first * grain);
  int64_t end = std::min(n, (first + count) * grain);
  if (begin < end) (*job_)(begin, end, thread_index);
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  CHECK_GE(grain, 1);
  if (n <= 0) return;
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_range(0);
  // Spin (the usual wait is microseconds), but yield if a worker was descheduled.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
      cpu_relax();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_range(thread_index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace pagoda
