// IoBackend: the disk tier's asynchronous file I/O, behind one small interface so that tests
// drive completion themselves (tests/kvcache/manual_io.h completes a request only when the test
// says so, and injects ENOSPC, EIO and short transfers) and production runs on io_uring.
//
//   io_uring  (make_uring_io_backend): one ring, requests submitted in batches, completions
//             reaped without a system call when none are ready. The kernel does the I/O; with
//             O_DIRECT nothing is copied through the page cache.
//   threads   (make_thread_io_backend): pread/pwrite on a few I/O threads of its own, for
//             kernels or sandboxes that refuse io_uring (kernel.io_uring_disabled, seccomp).
//
// A request is (tag, read|write, fd, offset, buffer, length); its result is the number of bytes
// moved or -errno. A result may be short (fewer bytes than asked); the caller decides (the disk
// tier resubmits the rest, and treats zero progress as a fault). Submission never fails: an
// error submitting a request comes back as that request's result.
//
// Direct I/O: open_file(..., direct = true) opens with O_DIRECT; then every buffer, offset and
// length must be a multiple of kIoAlign (4 KiB, >= any logical block size we meet). A file system
// that refuses O_DIRECT answers -EINVAL, at open or at the first transfer.
//
// Threads: a backend is driven from one thread. Results are delivered by reap()/wait() on it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::kvcache {

inline constexpr int64_t kIoAlign = 4096;

enum class IoOpcode : uint8_t { kRead, kWrite };

struct IoRequest {
  uint64_t tag = 0;           // the caller's name for it, returned in its IoResult
  IoOpcode opcode = IoOpcode::kRead;
  int fd = -1;
  int64_t offset = 0;         // bytes into the file
  uint8_t* buf = nullptr;     // [len] caller-owned until the result is reaped
  int64_t len = 0;
};

struct IoResult {
  uint64_t tag = 0;
  int64_t res = 0;            // bytes moved (may be < len), or -errno
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual std::string_view name() const = 0;  // "io_uring", "threads", "manual"

  // Opens `path` for reading and writing, creating it (0644) when missing; direct: O_DIRECT.
  // Returns the fd, or -errno.
  virtual int open_file(const std::string& path, bool direct) = 0;
  virtual void close_file(int fd) = 0;

  virtual int64_t max_in_flight() const = 0;
  virtual int64_t in_flight() const = 0;
  // Starts the requests. Precondition: in_flight() + requests.size() <= max_in_flight().
  virtual void submit(std::span<const IoRequest> requests) = 0;
  // Appends the results of finished requests; never blocks.
  virtual void reap(std::vector<IoResult>& out) = 0;
  // Blocks until at least one request in flight has finished and appends what finished.
  // Precondition: in_flight() > 0. Only for start-up and shutdown, never in the step loop.
  virtual void wait(std::vector<IoResult>& out) = 0;
};

// An io_uring of `queue_depth` entries. Fails (with the kernel's reason) where io_uring is
// unavailable.
Result<std::unique_ptr<IoBackend>> make_uring_io_backend(int queue_depth);
// `num_threads` I/O threads doing pread/pwrite; at most `queue_depth` requests in flight.
std::unique_ptr<IoBackend> make_thread_io_backend(int num_threads, int queue_depth);

}  // namespace pagoda::kvcache
