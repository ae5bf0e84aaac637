// ManualIo: an IoBackend for tests. Requests wait until the test completes them (complete_all,
// complete_at), in any order the test picks; completing one does the real pread/pwrite on the
// real file, unless a fault injected for it says otherwise (an errno, or a short transfer).
// wait() completes the oldest request (start-up paths block on it). Files open without
// O_DIRECT, but requests on a file opened "direct" are CHECKed for 4 KiB alignment.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "core/check.h"
#include "kvcache/disk_io.h"

namespace pagoda::kvcache {

class ManualIo final : public IoBackend {
 public:
  struct Fault {
    IoOpcode opcode = IoOpcode::kWrite;
    int64_t res = -EIO;      // < 0: fail with this -errno; >= 0: move only this many bytes
    int64_t skip = 0;        // let this many matching requests through first
  };
  struct Logged {
    IoOpcode opcode;
    int fd;
    int64_t offset, len;
  };

  explicit ManualIo(int64_t depth = 64) : depth_(depth) {}

  std::string_view name() const override { return "manual"; }
  int open_file(const std::string& path, bool direct) override {
    if (direct && refuse_direct) return -EINVAL;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    if (direct) direct_fds_.insert(fd);
    return fd;
  }
  void close_file(int fd) override {
    direct_fds_.erase(fd);
    ::close(fd);
  }
  int64_t max_in_flight() const override { return depth_; }
  int64_t in_flight() const override { return static_cast<int64_t>(pending_.size() + results_.size()); }

  void submit(std::span<const IoRequest> requests) override {
    CHECK_LE(in_flight() + static_cast<int64_t>(requests.size()), depth_);
    for (const IoRequest& r : requests) {
      if (direct_fds_.contains(r.fd)) {
        CHECK(r.offset % kIoAlign == 0 && r.len % kIoAlign == 0 && reinterpret_cast<uintptr_t>(r.buf) % kIoAlign == 0)
            << "unaligned direct I/O: offset " << r.offset << " len " << r.len;
      }
      pending_.push_back(r);
      log.push_back({r.opcode, r.fd, r.offset, r.len});
    }
  }
  void reap(std::vector<IoResult>& out) override {
    if (auto_complete) complete_all();
    for (const IoResult& r : results_) out.push_back(r);
    results_.clear();
  }
  void wait(std::vector<IoResult>& out) override {
    if (results_.empty()) complete_at(0);
    reap(out);
  }

  // Test controls.
  int64_t num_pending() const { return static_cast<int64_t>(pending_.size()); }
  const IoRequest& pending(int64_t i) const { return pending_[static_cast<size_t>(i)]; }
  void complete_all() {
    while (!pending_.empty()) complete_at(0);
  }
  void complete_at(int64_t i) {
    CHECK(i >= 0 && i < num_pending()) << "no pending request " << i;
    const IoRequest r = pending_[static_cast<size_t>(i)];
    pending_.erase(pending_.begin() + i);
    results_.push_back({r.tag, perform(r)});
  }
  void inject(Fault fault) { faults_.push_back(fault); }
  int64_t count(IoOpcode opcode) const {
    int64_t n = 0;
    for (const Logged& l : log) n += l.opcode == opcode;
    return n;
  }

  bool refuse_direct = false;   // open_file(direct) answers -EINVAL, as tmpfs once did
  bool auto_complete = false;   // reap() completes everything first
  std::vector<Logged> log;      // every request submitted, in order

 private:
  int64_t perform(const IoRequest& r) {
    int64_t limit = r.len;
    for (auto it = faults_.begin(); it != faults_.end(); ++it) {
      if (it->opcode != r.opcode) continue;
      if (it->skip > 0) {
        --it->skip;
        break;
      }
      const int64_t res = it->res;
      faults_.erase(it);
      if (res < 0) return res;
      limit = std::min(limit, res);
      break;
    }
    if (limit == 0) return 0;
    const ssize_t n = r.opcode == IoOpcode::kRead ? ::pread(r.fd, r.buf, static_cast<size_t>(limit), r.offset)
                                                  : ::pwrite(r.fd, r.buf, static_cast<size_t>(limit), r.offset);
    return n >= 0 ? n : -errno;
  }

  int64_t depth_;
  std::deque<IoRequest> pending_;
  std::vector<IoResult> results_;   // completed, not yet reaped
  std::vector<Fault> faults_;
  std::set<int> direct_fds_;
};

}  // namespace pagoda::kvcache
