// DiskTier::create: the directory checks, the direct-I/O probe, the slot files, and the
// start-up scan that rebuilds the index (the rules are at the top of disk_tier.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kvcache/disk_tier.h"

namespace pagoda::kvcache {
namespace {

constexpr int64_t kScanWholeSlotBytes = 64 << 10;  // slots this small are scanned whole, in large reads
constexpr int kFallbackIoThreads = 4;

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
std::string errno_text(int err) { return std::strerror(err); }

Status check_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::invalid_argument("--kv-disk-dir " + dir + " does not exist (create it first)");
    return Status::invalid_argument("--kv-disk-dir " + dir + ": " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode)) return Status::invalid_argument("--kv-disk-dir " + dir + " is not a directory");
  return Status::ok();
}

// DIR/kv-slots.lock, held (flock) for the tier's life: one process per directory.
Result<int> lock_dir(const std::string& dir) {
  const std::string path = dir + "/kv-slots.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::invalid_argument("--kv-disk-dir " + dir + " is not writable: " + errno_text(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Status::unavailable("--kv-disk-dir " + dir + " is in use by another process (it holds " + path + ")");
    }
    return Status::error("--kv-disk-dir " + dir + ": cannot lock " + path + ": " + errno_text(err));
  }
  return fd;
}

// One transfer, waited for (start-up only: nothing else is in flight).
int64_t transfer_now(IoBackend& io, const IoRequest& request) {
  io.submit(std::span<const IoRequest>(&request, 1));
  std::vector<IoResult> results;
  while (results.empty()) io.wait(results);
  return results.front().res;
}

// Writes a page into DIR/kv-slots.probe and reads it back through the backend: the directory is
// writable, not full, and (want_direct) whether O_DIRECT works there. `page` holds 2 x kIoAlign.
Result<bool> probe_dir(IoBackend& io, const std::string& dir, bool want_direct, uint8_t* page,
                       std::string& why_buffered) {
  const std::string path = dir + "/kv-slots.probe";
  for (bool direct : {true, false}) {
    if (direct && !want_direct) continue;
    const int fd = io.open_file(path, direct);
    if (fd == -EINVAL && direct) {
      why_buffered = "the file system refuses O_DIRECT (open: " + errno_text(EINVAL) + ")";
      continue;
    }
    if (fd < 0) return Status::invalid_argument("--kv-disk-dir " + dir + " is not writable: " + errno_text(-fd));
    for (int64_t i = 0; i < kIoAlign; ++i) page[i] = static_cast<uint8_t>(i * 7 + 1);
    int64_t res = transfer_now(io, IoRequest{0, IoOpcode::kWrite, fd, 0, page, kIoAlign});
    if (res == kIoAlign) res = transfer_now(io, IoRequest{0, IoOpcode::kRead, fd, 0, page + kIoAlign, kIoAlign});
    io.close_file(fd);
    ::unlink(path.c_str());
    if (res == -EINVAL && direct) {
      why_buffered = "the file system refuses O_DIRECT transfers (" + errno_text(EINVAL) + ")";
      continue;
    }
    if (res == -ENOSPC) return Status::unavailable("--kv-disk-dir " + dir + ": the disk is full (" + errno_text(ENOSPC) + ")");
    if (res < 0) return Status::error("--kv-disk-dir " + dir + ": a test write and read failed: " + errno_text(static_cast<int>(-res)));
    if (res != kIoAlign || std::memcmp(page, page + kIoAlign, kIoAlign) != 0) {
      return Status::error("--kv-disk-dir " + dir + ": a test page did not read back as written");
    }
    return direct;
  }
  return false;
}

// Writes `bytes` (one slot: a multiple of kIoAlign, `buf` holds them) into DIR/kv-slots.probe and
// times reading them back with `clock`: this disk's speed for a block, before any get. Failures
// give no sample (probe_dir has vetted the directory).
TransferSample time_slot_read(IoBackend& io, const std::string& dir, bool direct, uint8_t* buf, int64_t bytes,
                              const Clock& clock) {
  const std::string path = dir + "/kv-slots.probe";
  const int fd = io.open_file(path, direct);
  if (fd < 0) return {};
  TransferSample sample;
  if (transfer_now(io, IoRequest{0, IoOpcode::kWrite, fd, 0, buf, bytes}) == bytes) {
    const int64_t start = clock.now_ns();
    if (transfer_now(io, IoRequest{0, IoOpcode::kRead, fd, 0, buf, bytes}) == bytes) {
      sample = TransferSample{bytes, clock.now_ns() - start};
    }
  }
  io.close_file(fd);
  ::unlink(path.c_str());
  return sample.ns > 0 ? sample : TransferSample{};
}

// Bytes a file already has on disk (0 when missing).
int64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_blocks) * 512 : 0;
}

// Deletes DIR/kv-slots-NNNN.pgkv for NNNN >= num_files (capacity shrank); nothing else.
int64_t remove_extra_files(const std::string& dir, int64_t num_files) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int64_t removed = 0;
  while (const dirent* e = ::readdir(d)) {
    long long index = -1;
    int end = 0;
    if (std::sscanf(e->d_name, "kv-slots-%lld.pgkv%n", &index, &end) != 1 || e->d_name[end] != '\0') continue;
    if (index < num_files || disk_tier_file_path(dir, index) != dir + "/" + e->d_name) continue;
    if (::unlink((dir + "/" + e->d_name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::create(const DiskTierOptions& o, const Clock& clock, const Logger& logger,
                                                   std::unique_ptr<IoBackend> io) {
  PAGODA_RETURN_IF_ERROR(o.layout.validate());
  if (o.dir.empty()) return Status::invalid_argument("--kv-disk-dir is empty");
  if (o.capacity_bytes <= 0) return Status::invalid_argument("--kv-disk-mem must be positive");
  CHECK(o.queue_depth > 0 && o.max_request_bytes > 0 && o.file_bytes > 0) << "disk tier options";
  DiskTierInfo info;
  info.record_bytes = record_bytes(record_meta_for(o.layout));
  info.slot_bytes = round_up(info.record_bytes, kIoAlign);
  info.num_slots = o.capacity_bytes / info.slot_bytes;
  if (info.num_slots == 0) {
    return Status::invalid_argument("--kv-disk-mem " + format_bytes(o.capacity_bytes) + " holds no block (one takes " +
                                    format_bytes(info.slot_bytes) + ")");
  }
  if (info.num_slots > std::numeric_limits<int32_t>::max()) {
    return Status::invalid_argument("--kv-disk-mem " + format_bytes(o.capacity_bytes) + " is more than 2^31 blocks of " +
                                    format_bytes(info.slot_bytes));
  }
  info.slots_per_file = std::clamp<int64_t>(o.file_bytes / info.slot_bytes, 1, info.num_slots);
  info.num_files = (info.num_slots + info.slots_per_file - 1) / info.slots_per_file;
  PAGODA_RETURN_IF_ERROR(check_dir(o.dir));
  PAGODA_ASSIGN_OR_RETURN(const int lock_fd, lock_dir(o.dir));
  OpenFiles files;
  files.lock_fd = lock_fd;
  auto give_up = [&](Status st) -> Status {
    for (int fd : files.fds) io->close_file(fd);
    ::close(lock_fd);
    return st;
  };

  if (io == nullptr) {
    Result<std::unique_ptr<IoBackend>> uring = make_uring_io_backend(o.queue_depth);
    if (uring.is_ok()) {
      io = std::move(uring).value();
    } else {
      logger.warn("disk tier: " + uring.status().message() + "; using " + std::to_string(kFallbackIoThreads) +
                  " I/O threads (pread/pwrite) instead");
      io = make_thread_io_backend(kFallbackIoThreads, o.queue_depth);
    }
  }
  info.backend = std::string(io->name());
  const auto buffer_bytes = [&](int64_t want) {
    return static_cast<size_t>(std::max<int64_t>(1, want / info.slot_bytes) * info.slot_bytes);
  };
  Result<AlignedBuffer> write_buf =
      AlignedBuffer::allocate(buffer_bytes(std::max(o.write_buffer_bytes, o.min_write_blocks * info.slot_bytes)));
  Result<AlignedBuffer> read_buf = AlignedBuffer::allocate(buffer_bytes(o.read_buffer_bytes));
  Result<AlignedBuffer> zero_page = AlignedBuffer::allocate(kIoAlign);
  for (const auto* b : {&write_buf, &read_buf, &zero_page}) {
    if (!b->is_ok()) return give_up(b->status().with_context("disk tier buffers"));
  }

  std::string why_buffered = o.direct_io ? "" : "direct I/O is off";
  Result<bool> direct = probe_dir(*io, o.dir, o.direct_io, write_buf->data(), why_buffered);
  if (!direct.is_ok()) return give_up(direct.status());
  info.direct_io = *direct;
  info.probe_read = time_slot_read(*io, o.dir, info.direct_io, write_buf->data(), info.slot_bytes, clock);
  if (o.direct_io && !info.direct_io) logger.info("disk tier: " + o.dir + ": " + why_buffered + "; buffered I/O through the page cache");

  // Disk space for the files, taken now (fallocate) so that a full disk shows here.
  int64_t needed = 0;
  for (int64_t f = 0; f < info.num_files; ++f) {
    const int64_t slots = std::min(info.slots_per_file, info.num_slots - f * info.slots_per_file);
    needed += std::max<int64_t>(0, slots * info.slot_bytes - allocated_bytes(disk_tier_file_path(o.dir, f)));
  }
  struct statvfs vfs {};
  if (::statvfs(o.dir.c_str(), &vfs) == 0 &&
      needed > static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize)) {
    return give_up(Status::unavailable(
        "--kv-disk-dir " + o.dir + ": --kv-disk-mem " + format_bytes(o.capacity_bytes) + " needs " + format_bytes(needed) +
        " more disk space, the file system has " +
        format_bytes(static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize)) + " free"));
  }
  bool sparse = false;
  for (int64_t f = 0; f < info.num_files; ++f) {
    const std::string path = disk_tier_file_path(o.dir, f);
    const int fd = io->open_file(path, info.direct_io);
    if (fd < 0) return give_up(Status::error(path + ": " + errno_text(-fd)));
    files.fds.push_back(fd);
    struct stat st {};
    const int64_t size = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
    const int64_t target = std::min(info.slots_per_file, info.num_slots - f * info.slots_per_file) * info.slot_bytes;
    files.sizes.push_back(size);
    if (size > target && ::ftruncate(fd, target) != 0) return give_up(Status::error(path + ": truncate: " + errno_text(errno)));
    if (::fallocate(fd, 0, 0, target) != 0) {
      const int err = errno;
      if (err != EOPNOTSUPP && err != ENOSYS) {
        return give_up(Status::unavailable(path + ": cannot reserve " + format_bytes(target) + ": " + errno_text(err)));
      }
      if (::ftruncate(fd, target) != 0) return give_up(Status::error(path + ": " + errno_text(errno)));
      sparse = true;
    }
  }
  if (sparse) logger.info("disk tier: " + o.dir + ": the file system cannot preallocate; a disk that fills turns the tier off");
  info.files_removed = remove_extra_files(o.dir, info.num_files);

  const std::vector<int64_t> sizes = files.sizes;
  std::unique_ptr<DiskTier> tier(new DiskTier(o, clock, logger, std::move(io), std::move(info), std::move(files),
                                              std::move(write_buf).value(), std::move(read_buf).value(),
                                              std::move(zero_page).value()));
  std::memset(tier->zero_page_.data(), 0, kIoAlign);
  PAGODA_RETURN_IF_ERROR(tier->scan(sizes));
  return tier;
}

// Reads the first page of every slot (whole slots, several per request, when they are small),
// and adopts the complete records of this layout, model and KV format (disk_tier.h, Start-up).
Status DiskTier::scan(std::span<const int64_t> file_sizes) {
  const int64_t start_ns = clock_.now_ns();
  const int64_t header_bytes = record_header_bytes(options_.layout.block_size);
  const bool whole = info_.slot_bytes <= kScanWholeSlotBytes;
  const int64_t page = whole ? info_.slot_bytes : round_up(header_bytes, kIoAlign);
  const int64_t per_request =
      whole ? std::clamp<int64_t>(options_.max_request_bytes / info_.slot_bytes, 1, read_units_.size()) : 1;
  struct Pending {
    int64_t first_slot = 0, count = 0, len = 0;
  };
  std::vector<Pending> pending(static_cast<size_t>(read_units_.size()));  // by first unit (= tag)
  std::vector<IoResult> results;
  Status failed;
  int64_t next = 0;
  while (true) {
    while (failed.is_ok() && next < info_.num_slots && io_->in_flight() < io_->max_in_flight()) {
      const int64_t file_end = (next / info_.slots_per_file + 1) * info_.slots_per_file;
      const int64_t want = std::min({per_request, info_.num_slots - next, file_end - next});
      const RunAllocator::Run run = read_units_.allocate(want);
      if (run.count == 0) break;
      const int64_t len = whole ? run.count * info_.slot_bytes : page;
      pending[static_cast<size_t>(run.first)] = Pending{next, run.count, len};
      const IoRequest r{static_cast<uint64_t>(run.first), IoOpcode::kRead, fd_of(next), offset_of(next),
                        read_unit(run.first), len};
      io_->submit(std::span<const IoRequest>(&r, 1));
      next += run.count;
    }
    if (io_->in_flight() == 0) break;
    results.clear();
    io_->wait(results);
    for (const IoResult& res : results) {
      const Pending p = pending[res.tag];
      read_units_.release(static_cast<int64_t>(res.tag), p.count);
      if (res.res != p.len) {
        if (failed.is_ok()) {
          failed = Status::error(disk_tier_file_path(options_.dir, p.first_slot / info_.slots_per_file) +
                                 ": reading the slot headers at byte " + std::to_string(offset_of(p.first_slot)) +
                                 (res.res < 0 ? " failed: " + errno_text(static_cast<int>(-res.res)) : " came back short"));
        }
        continue;
      }
      for (int64_t k = 0; k < p.count; ++k) {
        const int64_t slot = p.first_slot + k;
        const uint8_t* bytes = read_unit(static_cast<int64_t>(res.tag)) + k * info_.slot_bytes;
        uint32_t head[2];
        std::memcpy(head, bytes, sizeof(head));
        if (head[0] == 0) {  // never written, or written without its magic
          info_.dropped_incomplete += head[1] != 0;
          continue;
        }
        Result<BlockRecordMeta> meta = peek_block_record(ConstByteSpan(bytes, static_cast<size_t>(header_bytes)));
        if (!meta.is_ok()) {
          ++info_.dropped_unreadable;
        } else if (!check_block_record(*meta, options_.layout, meta->ns, meta->block_hash).is_ok() ||
                   meta->ns.model_fingerprint != options_.model_fingerprint || meta->ns.kv_format != options_.kv_format) {
          ++info_.dropped_foreign;
        } else if (offset_of(slot) + info_.record_bytes >
                   file_sizes[static_cast<size_t>(slot / info_.slots_per_file)]) {
          ++info_.dropped_truncated;
        } else if (slots_.find(meta->block_hash)) {
          ++info_.dropped_duplicate;
        } else {
          slots_.adopt(slot, meta->block_hash);
          ++info_.records_found;
          found_.blocks.push_back(FoundBlock{meta->block_hash, meta->parent_hash, meta->ns});
          const size_t n = found_.tokens.size();
          found_.tokens.resize(n + static_cast<size_t>(meta->block_size));
          std::memcpy(found_.tokens.data() + n, bytes + kRecordFixedHeaderBytes,
                      static_cast<size_t>(meta->block_size) * sizeof(int32_t));  // block_record.h layout
        }
      }
    }
  }
  info_.scan_ns = clock_.now_ns() - start_ns;
  return failed;
}

}  // namespace pagoda::kvcache
