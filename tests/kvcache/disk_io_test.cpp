#include "kvcache/disk_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "core/buffer.h"
#include "disk_test_util.h"

namespace pagoda::kvcache {
namespace {

// Backends to test: io_uring where the kernel allows it, and the I/O threads always.
std::vector<std::unique_ptr<IoBackend>> backends(int depth) {
  std::vector<std::unique_ptr<IoBackend>> b;
  if (Result<std::unique_ptr<IoBackend>> uring = make_uring_io_backend(depth); uring.is_ok()) {
    b.push_back(std::move(uring).value());
  }
  b.push_back(make_thread_io_backend(3, depth));
  return b;
}

void drain(IoBackend& io, std::map<uint64_t, int64_t>& results) {
  std::vector<IoResult> out;
  while (io.in_flight() > 0) {
    out.clear();
    io.wait(out);
    for (const IoResult& r : out) results[r.tag] = r.res;
  }
}

TEST(IoBackend, WritesAndReadsManyRequestsInFlight) {
  disk_test::TempDir dir;
  constexpr int kDepth = 16, kPages = 48;
  for (auto& io : backends(kDepth)) {
    SCOPED_TRACE(std::string(io->name()));
    const int fd = io->open_file(dir.path + "/f-" + std::string(io->name()), /*direct=*/true);
    ASSERT_GE(fd, 0) << std::strerror(-fd);
    Result<AlignedBuffer> src = AlignedBuffer::allocate(kPages * kIoAlign), dst = AlignedBuffer::allocate(kPages * kIoAlign);
    ASSERT_TRUE(src.is_ok() && dst.is_ok());
    Rng rng(1);
    for (size_t i = 0; i < src->size(); ++i) src->data()[i] = static_cast<uint8_t>(rng.next_u64());
    for (IoOpcode op : {IoOpcode::kWrite, IoOpcode::kRead}) {
      std::map<uint64_t, int64_t> results;
      uint8_t* base = op == IoOpcode::kWrite ? src->data() : dst->data();
      for (int page = 0; page < kPages;) {
        std::vector<IoRequest> batch;
        while (page < kPages && io->in_flight() + static_cast<int64_t>(batch.size()) < io->max_in_flight()) {
          batch.push_back({static_cast<uint64_t>(page), op, fd, page * kIoAlign, base + page * kIoAlign, kIoAlign});
          ++page;
        }
        io->submit(batch);
        std::vector<IoResult> out;
        io->reap(out);  // never blocks
        for (const IoResult& r : out) results[r.tag] = r.res;
        if (io->in_flight() == io->max_in_flight()) {
          out.clear();
          io->wait(out);
          for (const IoResult& r : out) results[r.tag] = r.res;
        }
      }
      drain(*io, results);
      ASSERT_EQ(results.size(), static_cast<size_t>(kPages));
      for (const auto& [tag, res] : results) EXPECT_EQ(res, kIoAlign) << "page " << tag;
    }
    EXPECT_EQ(std::memcmp(src->data(), dst->data(), src->size()), 0);
    io->close_file(fd);
  }
}

TEST(IoBackend, ErrorsComeBackAsResults) {
  disk_test::TempDir dir;
  for (auto& io : backends(4)) {
    SCOPED_TRACE(std::string(io->name()));
    Result<AlignedBuffer> buf = AlignedBuffer::allocate(kIoAlign);
    ASSERT_TRUE(buf.is_ok());
    const IoRequest bad{7, IoOpcode::kRead, 1 << 20, 0, buf->data(), kIoAlign};  // no such fd
    io->submit(std::span<const IoRequest>(&bad, 1));
    std::map<uint64_t, int64_t> results;
    drain(*io, results);
    EXPECT_EQ(results.at(7), -EBADF);
    // A read past the end of a file is short (0 bytes), not an error.
    const int fd = io->open_file(dir.path + "/empty-" + std::string(io->name()), false);
    ASSERT_GE(fd, 0);
    const IoRequest past{8, IoOpcode::kRead, fd, 0, buf->data(), kIoAlign};
    io->submit(std::span<const IoRequest>(&past, 1));
    drain(*io, results);
    EXPECT_EQ(results.at(8), 0);
    io->close_file(fd);
    EXPECT_LT(io->open_file(dir.path + "/no/such/dir/f", false), 0);
  }
}

}  // namespace
}  // namespace pagoda::kvcache
