#include "kvcache/disk_io.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/check.h"

namespace pagoda::kvcache {
namespace {

int open_rw(const std::string& path, bool direct) {
  int flags = O_RDWR | O_CREAT | O_CLOEXEC;
  if (direct) flags |= O_DIRECT;
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  return fd >= 0 ? fd : -errno;
}

// One blocking transfer, as a result (bytes or -errno); EINTR is retried.
int64_t transfer(const IoRequest& r) {
  for (;;) {
    const ssize_t n = r.opcode == IoOpcode::kRead ? ::pread(r.fd, r.buf, static_cast<size_t>(r.len), r.offset)
                                                  : ::pwrite(r.fd, r.buf, static_cast<size_t>(r.len), r.offset);
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

// What both backends share: files opened with open(2), a bound on requests in flight.
class PosixBackend : public IoBackend {
 public:
  explicit PosixBackend(int depth) : depth_(depth) {}
  int open_file(const std::string& path, bool direct) override { return open_rw(path, direct); }
  void close_file(int fd) override { ::close(fd); }
  int64_t max_in_flight() const override { return depth_; }
  int64_t in_flight() const override { return in_flight_; }

 protected:
  void check_room(size_t n) const { CHECK_LE(in_flight_ + static_cast<int64_t>(n), static_cast<int64_t>(depth_)); }
  int depth_;
  int64_t in_flight_ = 0;  // submitted and not yet reaped (owner thread only)
};

class UringBackend final : public PosixBackend {
 public:
  explicit UringBackend(int depth) : PosixBackend(depth) {}
  ~UringBackend() override {
    // The owner drains its requests before it destroys us (their buffers are its own).
    CHECK_EQ(in_flight_, 0) << "io_uring destroyed with requests in flight";
    if (ready_) io_uring_queue_exit(&ring_);
  }
  int init() {
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    ready_ = rc == 0;
    return rc;
  }

  std::string_view name() const override { return "io_uring"; }

  void submit(std::span<const IoRequest> requests) override {
    check_room(requests.size());
    for (const IoRequest& r : requests) {
      ++in_flight_;
      if (broken_ != 0) {
        failed_.push_back({r.tag, -broken_});
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      CHECK(sqe != nullptr) << "io_uring submission queue full with " << in_flight_ << " in flight";
      if (r.opcode == IoOpcode::kRead) {
        io_uring_prep_read(sqe, r.fd, r.buf, static_cast<unsigned>(r.len), static_cast<uint64_t>(r.offset));
      } else {
        io_uring_prep_write(sqe, r.fd, r.buf, static_cast<unsigned>(r.len), static_cast<uint64_t>(r.offset));
      }
      io_uring_sqe_set_data64(sqe, r.tag);
      unsubmitted_.push_back(r.tag);
    }
    flush();
  }

  void reap(std::vector<IoResult>& out) override {
    flush();
    drain_failed(out);
    io_uring_cqe* cqe = nullptr;
    while (in_flight_ > 0 && io_uring_peek_cqe(&ring_, &cqe) == 0) take(cqe, out);
  }

  void wait(std::vector<IoResult>& out) override {
    CHECK_GT(in_flight_, 0);
    flush();
    if (!failed_.empty()) return drain_failed(out);
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR);
    CHECK_EQ(rc, 0) << "io_uring_wait_cqe: " << std::strerror(-rc);
    take(cqe, out);
    reap(out);
  }

 private:
  void take(io_uring_cqe* cqe, std::vector<IoResult>& out) {
    out.push_back({io_uring_cqe_get_data64(cqe), cqe->res});
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
  }
  void drain_failed(std::vector<IoResult>& out) {
    for (const IoResult& r : failed_) out.push_back(r);
    in_flight_ -= static_cast<int64_t>(failed_.size());
    failed_.clear();
  }
  // Hands queued entries to the kernel. EAGAIN/EBUSY (kernel short of memory, completion queue
  // busy) leave them queued for the next call; any other error breaks the ring: what was queued
  // fails with that error, and so does everything submitted later.
  void flush() {
    while (!unsubmitted_.empty() && broken_ == 0) {
      const int n = io_uring_submit(&ring_);
      if (n > 0) {
        for (int i = 0; i < n; ++i) unsubmitted_.pop_front();
      } else if (n == -EINTR) {
        continue;
      } else if (n == 0 || n == -EAGAIN || n == -EBUSY) {
        return;
      } else {
        broken_ = -n;
        for (uint64_t tag : unsubmitted_) failed_.push_back({tag, n});
        unsubmitted_.clear();
      }
    }
  }

  io_uring ring_{};
  bool ready_ = false;               // ring_ set up (init succeeded)
  std::deque<uint64_t> unsubmitted_;  // tags in the submission queue, not yet taken by the kernel
  std::vector<IoResult> failed_;      // results made here (a broken ring), delivered by reap
  int broken_ = 0;                    // errno that broke the ring, 0 while it works
};

class ThreadBackend final : public PosixBackend {
 public:
  ThreadBackend(int num_threads, int depth) : PosixBackend(depth) {
    for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~ThreadBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  std::string_view name() const override { return "threads"; }

  void submit(std::span<const IoRequest> requests) override {
    check_room(requests.size());
    {
      std::lock_guard lock(mu_);
      for (const IoRequest& r : requests) queue_.push_back(r);
    }
    in_flight_ += static_cast<int64_t>(requests.size());
    work_cv_.notify_all();
  }

  void reap(std::vector<IoResult>& out) override {
    std::lock_guard lock(mu_);
    take(out);
  }

  void wait(std::vector<IoResult>& out) override {
    CHECK_GT(in_flight_, 0);
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return !results_.empty(); });
    take(out);
  }

 private:
  void take(std::vector<IoResult>& out) {
    for (const IoResult& r : results_) out.push_back(r);
    in_flight_ -= static_cast<int64_t>(results_.size());
    results_.clear();
  }
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      const IoRequest r = queue_.front();
      queue_.pop_front();
      lock.unlock();
      const IoResult result{r.tag, transfer(r)};
      lock.lock();
      results_.push_back(result);
      done_cv_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<IoRequest> queue_;    // guarded by mu_
  std::vector<IoResult> results_;  // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace

Result<std::unique_ptr<IoBackend>> make_uring_io_backend(int queue_depth) {
  CHECK_GT(queue_depth, 0);
  auto backend = std::make_unique<UringBackend>(queue_depth);
  const int rc = backend->init();
  if (rc < 0) {
    return Status::error(std::string("io_uring unavailable: ") + std::strerror(-rc));
  }
  return std::unique_ptr<IoBackend>(std::move(backend));
}

std::unique_ptr<IoBackend> make_thread_io_backend(int num_threads, int queue_depth) {
  CHECK_GT(num_threads, 0);
  CHECK_GT(queue_depth, 0);
  return std::make_unique<ThreadBackend>(num_threads, queue_depth);
}

}  // namespace pagoda::kvcache
