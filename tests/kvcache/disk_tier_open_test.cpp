// DiskTier::create and the start-up scan, over the real backends on a temporary directory:
// directory errors, restart, corruption, truncation, foreign records, kill -9 mid-write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "disk_test_util.h"
#include "kvcache/disk_tier.h"

namespace pagoda::kvcache {
namespace {

using namespace disk_test;  // NOLINT

class DiskTierOpenTest : public ::testing::Test {
 protected:
  DiskTierOptions options(int64_t capacity_blocks, const KvLayout& l = small_layout(), KvNamespace ns = kNs) {
    return options_for(dir_.path, l, capacity_blocks, ns);
  }
  std::unique_ptr<DiskTier> open(const DiskTierOptions& o, std::unique_ptr<IoBackend> io = nullptr) {
    return open_tier(o, clock_, log_.logger, std::move(io));
  }
  Status open_error(const DiskTierOptions& o, std::unique_ptr<IoBackend> io = nullptr) {
    Result<std::unique_ptr<DiskTier>> tier = DiskTier::create(o, clock_, log_.logger, std::move(io));
    EXPECT_FALSE(tier.is_ok());
    return tier.status();
  }
  static int64_t put(DiskTier& tier, const std::vector<TestBlock>& chain) {
    const std::vector<TierPut> puts = puts_of(chain);
    return finish(tier, tier.put(puts), nullptr).num_ok;
  }
  static int64_t held(DiskTier& tier, const std::vector<TestBlock>& chain) {
    const std::vector<BlockHash> hashes = hashes_of(chain);
    return finish(tier, tier.lookup(hashes), nullptr).num_ok;
  }
  // How many blocks of `chain` come back, each checked against what was put.
  static int64_t read_back(DiskTier& tier, const std::vector<TestBlock>& chain, const KvLayout& l = small_layout()) {
    std::vector<Dest> dests = dests_for(l, chain.size());
    const std::vector<TierGet> gets = gets_of(chain, dests);
    const TierCompletion c = finish(tier, tier.get(gets), nullptr);
    for (int64_t i = 0; i < c.num_ok; ++i) EXPECT_TRUE(dests[static_cast<size_t>(i)].holds(chain[static_cast<size_t>(i)]));
    if (c.num_ok < static_cast<int64_t>(chain.size())) {
      EXPECT_TRUE(dests[static_cast<size_t>(c.num_ok)].untouched());
    }
    return c.num_ok;
  }
  void patch_file(int64_t offset, uint8_t x) {
    const int fd = ::open(disk_tier_file_path(dir_.path, 0).c_str(), O_RDWR);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
    b ^= x;
    ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
    ::close(fd);
  }

  TempDir dir_;
  SteadyClock clock_;
  LogCapture log_;
};

TEST_F(DiskTierOpenTest, DirectoryProblemsAreClearErrors) {
  DiskTierOptions o = options(8);
  o.dir = dir_.path + "/missing";
  EXPECT_NE(open_error(o).message().find("does not exist"), std::string::npos);
  o.dir = dir_.path + "/a-file";
  std::ofstream(o.dir) << "x";
  EXPECT_NE(open_error(o).message().find("is not a directory"), std::string::npos);
  o.dir = "/proc";  // not writable, even for root
  EXPECT_NE(open_error(o).message().find("not writable"), std::string::npos) << open_error(o).message();
  if (::geteuid() != 0) {
    o.dir = dir_.path + "/read-only";
    ASSERT_EQ(::mkdir(o.dir.c_str(), 0500), 0);
    EXPECT_NE(open_error(o).message().find("not writable"), std::string::npos);
  }
  o = options(8);
  o.capacity_bytes = 100;
  EXPECT_NE(open_error(o).message().find("holds no block"), std::string::npos);
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(dir_.path.c_str(), &vfs), 0);
  o.capacity_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) + (int64_t{1} << 30);
  o.file_bytes = o.capacity_bytes;
  const Status full = open_error(o);
  EXPECT_NE(full.message().find("more disk space"), std::string::npos) << full.message();
  EXPECT_EQ(full.code(), StatusCode::kUnavailable);
}

TEST_F(DiskTierOpenTest, SecondProcessOnTheDirectoryIsRefused) {
  auto first = open(options(8));
  EXPECT_NE(open_error(options(8)).message().find("in use by another process"), std::string::npos);
  first.reset();
  EXPECT_NE(open(options(8)), nullptr);
}

TEST_F(DiskTierOpenTest, FullDiskOrFailingDiskAtStartUpIsAnError) {
  auto io = std::make_unique<ManualIo>();
  io->inject({IoOpcode::kWrite, -ENOSPC});  // the probe page
  EXPECT_NE(open_error(options(8), std::move(io)).message().find("disk is full"), std::string::npos);
  { auto tier = open(options(8)); }  // files now exist: the scan reads them
  io = std::make_unique<ManualIo>();
  io->inject({IoOpcode::kRead, -EIO, 2});  // the first two reads are the probes' (a page, the timed slot); then the scan
  const Status st = open_error(options(8), std::move(io));
  EXPECT_NE(st.message().find("reading the slot headers"), std::string::npos) << st.message();
}

// A clock that moves 1 us each time it is read.
class TickingClock final : public Clock {
 public:
  int64_t now_ns() const override { return now_ += 1000; }

 private:
  mutable int64_t now_ = 0;
};

// create() reads one slot back and times it (Tier::take_transfer_sample, once): the load-cost
// model's first figure for this disk. A clock that does not move gives no sample.
TEST_F(DiskTierOpenTest, StartUpProbeTimesOneSlotRead) {
  TickingClock ticks;
  auto tier = open_tier(options(8), ticks, log_.logger);
  const TransferSample s = tier->take_transfer_sample();
  EXPECT_EQ(s.bytes, slot_bytes_of(small_layout()));
  EXPECT_GT(s.ns, 0);
  EXPECT_EQ(tier->take_transfer_sample().bytes, 0) << "given once";
  tier.reset();
  ManualClock still;
  EXPECT_EQ(open_tier(options(8), still, log_.logger)->take_transfer_sample().bytes, 0) << "a clock that does not move";
}

TEST_F(DiskTierOpenTest, BackendIsIoUringWhereTheKernelAllowsIt) {
  auto tier = open(options(8));
  if (make_uring_io_backend(4).is_ok()) {
    EXPECT_EQ(tier->info().backend, "io_uring");
  } else {
    EXPECT_EQ(tier->info().backend, "threads");
    EXPECT_EQ(log_.count("io_uring unavailable"), 1);
  }
  EXPECT_NE(tier->describe().find("8 blocks"), std::string::npos) << tier->describe();
}

TEST_F(DiskTierOpenTest, RestartFindsEveryRecord) {
  const auto a = make_chain(small_layout(), 5, 1), b = make_chain(small_layout(), 7, 2), c = make_chain(small_layout(), 3, 3);
  for (int backend = 0; backend < 2; ++backend) {
    SCOPED_TRACE(backend == 0 ? "io_uring" : "threads");
    auto io = [&]() -> std::unique_ptr<IoBackend> { return backend == 0 ? nullptr : make_thread_io_backend(2, 16); };
    {
      auto tier = open(options(64), io());
      ASSERT_EQ(put(*tier, a), 5);
      ASSERT_EQ(put(*tier, b), 7);
      ASSERT_EQ(put(*tier, c), 3);
    }
    auto tier = open(options(64), io());
    EXPECT_EQ(tier->info().records_found, 15);
    EXPECT_NE(tier->describe().find("found 15 records"), std::string::npos) << tier->describe();
    EXPECT_EQ(held(*tier, b), 7);
    EXPECT_EQ(read_back(*tier, a), 5);
    EXPECT_EQ(read_back(*tier, b), 7);
    EXPECT_EQ(read_back(*tier, c), 3);
    EXPECT_EQ(tier->stats().corrupt_records, 0);
  }
}

TEST_F(DiskTierOpenTest, ChainIsReadWithOneRequestOverTheRealBackend) {
  auto tier = open(options(64));
  const auto chain = make_chain(small_layout(), 16, 5);
  ASSERT_EQ(put(*tier, chain), 16);
  const int64_t before = tier->io_stats().read_requests;
  EXPECT_EQ(read_back(*tier, chain), 16);
  EXPECT_EQ(tier->io_stats().read_requests - before, 1);
}

TEST_F(DiskTierOpenTest, ErasedRecordsStayGoneAfterRestart) {
  const auto a = make_chain(small_layout(), 1, 1), b = make_chain(small_layout(), 1, 2);
  {
    auto tier = open(options(8));
    ASSERT_EQ(put(*tier, a), 1);
    ASSERT_EQ(put(*tier, b), 1);
    const std::vector<BlockHash> h = hashes_of(a);
    tier->erase(h);
  }  // the destructor finishes the zero page
  auto tier = open(options(8));
  EXPECT_EQ(tier->info().records_found, 1);
  EXPECT_EQ(held(*tier, a), 0);
  EXPECT_EQ(read_back(*tier, b), 1);
}

TEST_F(DiskTierOpenTest, BitFlipsAreNeverUsed) {
  const KvLayout l = small_layout();
  const int64_t slot = slot_bytes_of(l);
  const auto chain = make_chain(l, 5, 7);
  {
    auto tier = open(options(8));
    ASSERT_EQ(put(*tier, chain), 5);  // slots 0..4
  }
  patch_file(0 * slot + 0, 0x01);                                    // magic
  patch_file(1 * slot + 64, 0x01);                                   // block hash field
  patch_file(2 * slot + 128, 0x01);                                  // a token id
  patch_file(3 * slot + record_header_bytes(l.block_size) + 9, 0x80);  // the payload
  auto tier = open(options(8));
  EXPECT_EQ(tier->info().dropped_unreadable, 1);
  EXPECT_EQ(tier->info().records_found, 4);  // the header is all a scan reads
  EXPECT_EQ(held(*tier, chain), 0);
  EXPECT_EQ(held(*tier, {chain[1]}), 0);     // indexed under the flipped hash: never matches
  EXPECT_EQ(read_back(*tier, {chain[2]}), 0);
  EXPECT_EQ(read_back(*tier, {chain[3]}), 0);
  EXPECT_EQ(read_back(*tier, {chain[4]}), 1);
  EXPECT_EQ(tier->stats().corrupt_records, 2);
  EXPECT_EQ(held(*tier, {chain[2]}), 0);
  tier.reset();
  tier = open(options(8));  // the bad ones were zeroed: not even indexed now
  EXPECT_EQ(tier->info().records_found, 2);
  EXPECT_EQ(read_back(*tier, {chain[4]}), 1);
}

TEST_F(DiskTierOpenTest, TruncatedFileIsDetected) {
  const KvLayout l = small_layout();
  const int64_t slot = slot_bytes_of(l);
  const auto chain = make_chain(l, 4, 8);
  {
    auto tier = open(options(8));
    ASSERT_EQ(put(*tier, chain), 4);
  }
  ASSERT_EQ(::truncate(disk_tier_file_path(dir_.path, 0).c_str(), 2 * slot + 700), 0);  // inside block 2
  auto tier = open(options(8));
  EXPECT_EQ(tier->info().records_found, 2);
  EXPECT_EQ(tier->info().dropped_truncated, 1);
  EXPECT_EQ(held(*tier, chain), 2);
  EXPECT_EQ(read_back(*tier, chain), 2);
  struct stat st {};
  ASSERT_EQ(::stat(disk_tier_file_path(dir_.path, 0).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8 * slot) << "the file is sized again";
  const auto more = make_chain(l, 6, 9);
  EXPECT_EQ(put(*tier, more), 6);
  EXPECT_EQ(read_back(*tier, more), 6);
}

TEST_F(DiskTierOpenTest, ForeignRecordsAreNeverUsed) {
  const KvLayout l = small_layout();
  const auto chain = make_chain(l, 4, 10);
  {
    auto tier = open(options(8));
    ASSERT_EQ(put(*tier, chain), 4);
  }
  KvLayout bigger_blocks = l;
  bigger_blocks.block_size = 8;  // same slot size: the records are read and rejected
  const std::vector<DiskTierOptions> others = {
      options(8, l, KvNamespace{999, kNs.kv_format, 0}),      // another model
      options(8, l, KvNamespace{kNs.model_fingerprint, 777, 0}),  // another KV format key
      options(8, bigger_blocks), options(8, small_layout(kernels::KvDType::kF16))};
  for (const DiskTierOptions& o : others) {
    auto tier = open(o);
    EXPECT_EQ(tier->info().records_found, 0);
    EXPECT_EQ(tier->info().dropped_foreign, 4);
    EXPECT_EQ(tier->stats().used_blocks, 0);
  }
  // Dropped means free space, overwritten as needed: untouched ones are found by their model.
  auto tier = open(options(8));
  EXPECT_EQ(tier->info().records_found, 4);
  EXPECT_EQ(read_back(*tier, chain), 4);
}

TEST_F(DiskTierOpenTest, ForeignFilesAreIgnoredOrOverwritten) {
  {
    std::ofstream garbage(disk_tier_file_path(dir_.path, 0), std::ios::binary);
    Rng rng(3);
    for (int i = 0; i < 8 * 4096; ++i) garbage.put(static_cast<char>(rng.next_u64()));
    std::ofstream(dir_.path + "/notes.txt") << "keep me";
    std::ofstream(dir_.path + "/kv-slots-0007.pgkv.bak") << "keep me too";
  }
  auto tier = open(options(8));
  EXPECT_EQ(tier->info().records_found, 0);
  EXPECT_GT(tier->info().dropped_unreadable, 0);
  const auto chain = make_chain(small_layout(), 8, 11);
  EXPECT_EQ(put(*tier, chain), 8);
  EXPECT_EQ(read_back(*tier, chain), 8);
  std::string text;
  std::getline(std::ifstream(dir_.path + "/notes.txt"), text);
  EXPECT_EQ(text, "keep me");
  EXPECT_TRUE(std::ifstream(dir_.path + "/kv-slots-0007.pgkv.bak").good());
}

TEST_F(DiskTierOpenTest, ShrinkingCapacityRemovesItsExtraFiles) {
  const int64_t slot = slot_bytes_of(small_layout());
  const auto chain = make_chain(small_layout(), 10, 12);
  {
    DiskTierOptions o = options(16);
    o.file_bytes = 4 * slot;
    auto tier = open(o);
    EXPECT_EQ(tier->info().num_files, 4);
    ASSERT_EQ(put(*tier, chain), 10);
    EXPECT_EQ(read_back(*tier, chain), 10);  // across three files
  }
  DiskTierOptions o = options(4);
  o.file_bytes = 4 * slot;
  auto tier = open(o);
  EXPECT_EQ(tier->info().files_removed, 3);
  EXPECT_EQ(tier->info().records_found, 4);
  EXPECT_EQ(read_back(*tier, chain), 4);
  EXPECT_FALSE(std::ifstream(disk_tier_file_path(dir_.path, 1)).good());
}

TEST_F(DiskTierOpenTest, DirectIoFallbackIsLoggedOnce) {
  auto io = std::make_unique<ManualIo>();
  io->refuse_direct = true;
  io->auto_complete = true;
  auto tier = open(options(8), std::move(io));
  EXPECT_FALSE(tier->info().direct_io);
  EXPECT_EQ(log_.count("refuses O_DIRECT"), 1) << log_.text();
  EXPECT_NE(tier->describe().find("buffered I/O"), std::string::npos);
  const auto chain = make_chain(small_layout(), 3, 13);
  EXPECT_EQ(put(*tier, chain), 3);
  EXPECT_EQ(read_back(*tier, chain), 3);
  EXPECT_EQ(log_.count("refuses O_DIRECT"), 1);
  DiskTierOptions off = options(8);
  off.direct_io = false;
  tier.reset();
  tier = open(off);
  EXPECT_FALSE(tier->info().direct_io);
  EXPECT_EQ(log_.count("O_DIRECT"), 1) << "turned off on purpose: nothing to report";
}

// A writer killed with SIGKILL while its writes are in flight leaves only whole records: every
// block it saw committed is found, and every block found verifies.
TEST_F(DiskTierOpenTest, KillDuringWritesLeavesOnlyWholeRecords) {
  const KvLayout l = small_layout();
  constexpr int kChains = 150, kReported = 60, kLen = 4;
  std::vector<std::vector<TestBlock>> chains;
  for (int i = 0; i < kChains; ++i) chains.push_back(make_chain(l, kLen, 5000 + i));
  DiskTierOptions o = options(kChains * kLen);
  o.write_buffer_bytes = 8 * kLen * slot_bytes_of(l);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the writer: puts chains, 8 in flight, and reports each completed one
    ::close(fds[0]);
    Logger silent(LogLevel::kSilent);
    Result<std::unique_ptr<DiskTier>> tier = DiskTier::create(o, clock_, silent);
    if (!tier.is_ok()) ::_exit(2);
    std::map<TierOpId, int32_t> in_flight;
    std::vector<std::vector<TierPut>> puts(kChains);
    std::vector<TierCompletion> out;
    for (int32_t next = 0;;) {
      while (in_flight.size() < 8 && next < kChains) {
        puts[next] = puts_of(chains[next]);
        in_flight[(*tier)->put(puts[next])] = next;
        ++next;
      }
      out.clear();
      (*tier)->poll(out);
      for (const TierCompletion& c : out) {
        const int32_t report = c.num_ok == kLen ? in_flight.at(c.op) : -1;  // -1: a put failed
        if (::write(fds[1], &report, 4) != 4) ::_exit(3);
        in_flight.erase(c.op);
      }
      if (next == kChains && in_flight.empty()) {
        const int32_t done = -1;
        if (::write(fds[1], &done, 4) != 4) ::_exit(3);
        for (;;) ::pause();  // wait for the kill
      }
    }
  }
  ::close(fds[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  };
  std::vector<int32_t> committed;
  {
    Reaper reaper{pid};
    int32_t index;
    while (static_cast<int>(committed.size()) < kReported && ::read(fds[0], &index, 4) == 4 && index >= 0) {
      committed.push_back(index);
    }
  }  // SIGKILL while the next writes are in flight
  ::close(fds[0]);
  ASSERT_EQ(static_cast<int>(committed.size()), kReported);
  auto tier = open(o);
  for (int32_t i : committed) EXPECT_EQ(held(*tier, chains[static_cast<size_t>(i)]), kLen) << "chain " << i;
  int64_t found = 0;  // block by block: commits may land out of chain order
  for (const auto& chain : chains) {
    for (const TestBlock& b : chain) {
      if (held(*tier, {b}) == 0) continue;
      EXPECT_EQ(read_back(*tier, {b}), 1);
      ++found;
    }
  }
  EXPECT_EQ(found, tier->info().records_found);
  EXPECT_GE(found, kReported * kLen);
  EXPECT_EQ(tier->stats().corrupt_records, 0);
}

}  // namespace
}  // namespace pagoda::kvcache
