// ThreadPool: the one source of threads for compute (DESIGN.md rule 10).
//
// `parallel_for(n, fn)` splits [0, n) into `num_threads()` contiguous ranges and calls
// fn(begin, end, thread_index) on each, the calling thread taking range 0. It returns when
// all ranges are done. Workers spin briefly between jobs (decode issues hundreds of small
// jobs per token) and then sleep on a condition variable, so an idle pool costs no CPU.
// Not re-entrant: fn must not call parallel_for on the same pool. One caller at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread_index)>;

  explicit ThreadPool(int num_threads);  // num_threads >= 1 (the caller counts as one)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into num_threads near-equal ranges, each a multiple of `grain` except
  // the last. Ranges may be empty (fn is not called for those).
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // The grain that gives every thread at least `min_work` units of work when each index costs
  // `work_per_index` (a multiple of `grain`). Jobs too small to pay for waking the workers
  // (a few microseconds, far more when the CPUs are oversubscribed) then run inline.
  static int64_t grain_for(int64_t work_per_index, int64_t min_work, int64_t grain = 1) {
    const int64_t per = work_per_index > 0 ? work_per_index : 1;
    const int64_t needed = (min_work + per - 1) / per;
    return needed <= grain ? grain : (needed + grain - 1) / grain * grain;
  }
  // Work (multiply-adds) below which a thread's share is not worth a hand-off.
  static constexpr int64_t kMinWorkPerThread = 32 * 1024;

  // Number of logical CPUs this process may use.
  static int hardware_threads();

 private:
  void worker_loop(int thread_index);
  void run_range(int thread_index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace pagoda
