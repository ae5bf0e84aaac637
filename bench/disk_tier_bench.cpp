// The SSD tier's bandwidth while promoting long chains (a ~1,900-token prefix of llama-110m f16
// is 119 blocks of 580 KiB) into pool blocks, next to fio's sequential reads of the same files
// (Debian fio; bench-only, not in install_deps) with the same block size and with the tier's
// request size. The tier's number is the real path: coalesced io_uring reads into bounce
// buffers, XXH3 verification of every record, copy into BlockPool blocks.
//
//   heavy ./build/bin/disk_tier_bench [--dir /var/tmp/pagoda-disk-bench] [--chains 12] [--runs 5]
//
// Prints one table (median of --runs). The directory must be on the disk under test (not tmpfs);
// the slot files are deleted at the end unless --keep.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"
#include "kvcache/block_pool.h"
#include "kvcache/disk_tier.h"

using namespace pagoda;
using namespace pagoda::kvcache;

namespace {

struct Options {
  std::string dir = "/var/tmp/pagoda-disk-bench";
  int64_t chains = 24;          // chains written (24 x 119 blocks x 580 KiB = 1.6 GiB)
  int64_t chain_blocks = 119;   // 1,904 tokens of 16
  int runs = 5;
  int queue_depth = 64;
  int64_t max_request_bytes = int64_t{8} << 20;
  int64_t read_buffer_bytes = int64_t{160} << 20;
  bool keep = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir") o.dir = next();
    else if (a == "--chains") o.chains = std::atoll(next().c_str());
    else if (a == "--chain-blocks") o.chain_blocks = std::atoll(next().c_str());
    else if (a == "--runs") o.runs = std::atoi(next().c_str());
    else if (a == "--queue-depth") o.queue_depth = std::atoi(next().c_str());
    else if (a == "--max-request") o.max_request_bytes = parse_bytes(next()).value();
    else if (a == "--keep") o.keep = true;
    else {
      std::fprintf(stderr, "usage: disk_tier_bench [--dir D] [--chains N] [--chain-blocks N] [--runs N] [--queue-depth N] [--max-request 8M] [--keep]\n");
      std::exit(2);
    }
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Polls until every op in `ids` has completed; returns how many items succeeded in all.
int64_t wait_all(DiskTier& tier, std::vector<TierOpId> ids) {
  std::vector<TierCompletion> out;
  int64_t ok = 0;
  while (!ids.empty()) {
    out.clear();
    tier.poll(out);
    for (const TierCompletion& c : out) {
      auto it = std::find(ids.begin(), ids.end(), c.op);
      if (it == ids.end()) continue;
      ok += c.num_ok;
      ids.erase(it);
    }
  }
  return ok;
}

// fio's sequential read bandwidth (bytes/s) of `file`, or -1 without fio.
// fixed: registered buffers and file (--fixedbufs --registerfiles): no page pinning per I/O.
double fio_read(const std::string& file, int64_t bytes, int64_t bs, int depth, bool fixed) {
  const std::string cmd = "fio --name=seq --filename=" + file + " --rw=read --bs=" + std::to_string(bs) +
                          " --size=" + std::to_string(bytes) + " --direct=1 --ioengine=io_uring --iodepth=" +
                          std::to_string(depth) + (fixed ? " --fixedbufs --registerfiles" : "") +
                          " --readonly --invalidate=1 --output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
  if (pclose(p) != 0) return -1;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return -1;
  return j["jobs"][0]["read"]["bw_bytes"].get<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  KvLayout layout;  // llama-110m, f16 KV
  layout.n_layer = 12;
  layout.n_kv_head = 12;
  layout.head_dim = 64;
  layout.block_size = 16;
  layout.dtype = kernels::KvDType::kF16;
  std::filesystem::create_directories(opt.dir);
  for (const auto& e : std::filesystem::directory_iterator(opt.dir)) {
    if (e.path().filename().string().rfind("kv-slots", 0) == 0) std::filesystem::remove(e.path());
  }
  SteadyClock clock;
  Logger logger(LogLevel::kWarn);
  const int64_t slot = (record_bytes(record_meta_for(layout)) + kIoAlign - 1) / kIoAlign * kIoAlign;
  DiskTierOptions o;
  o.dir = opt.dir;
  o.layout = layout;
  o.capacity_bytes = opt.chains * opt.chain_blocks * slot;
  o.model_fingerprint = 1;
  o.kv_format = 2;
  o.queue_depth = opt.queue_depth;
  o.max_request_bytes = opt.max_request_bytes;
  o.read_buffer_bytes = opt.read_buffer_bytes;
  auto created = DiskTier::create(o, clock, logger);
  if (!created.is_ok()) {
    std::fprintf(stderr, "%s\n", created.status().message().c_str());
    return 1;
  }
  std::unique_ptr<DiskTier> tier = std::move(created).value();

  // Chains of distinct blocks: random tokens (so distinct hashes), one random payload per
  // position in the chain (so every record of a chain differs).
  const KvNamespace ns{1, 2, 0};
  Rng rng(1);
  std::vector<uint8_t> payload(static_cast<size_t>(opt.chain_blocks * layout.bytes_per_block()));
  for (auto& b : payload) b = static_cast<uint8_t>(rng.next_u64());
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(opt.chains * opt.chain_blocks), std::vector<int32_t>(16));
  std::vector<std::vector<BlockHash>> hashes(static_cast<size_t>(opt.chains));
  std::vector<std::vector<TierPut>> puts(static_cast<size_t>(opt.chains));
  std::vector<ConstByteSpan> segs(static_cast<size_t>(opt.chain_blocks));
  for (int64_t b = 0; b < opt.chain_blocks; ++b) {
    segs[static_cast<size_t>(b)] = {payload.data() + b * layout.bytes_per_block(), static_cast<size_t>(layout.bytes_per_block())};
  }
  for (int64_t c = 0; c < opt.chains; ++c) {
    BlockHash parent = kRootBlockHash;
    for (int64_t b = 0; b < opt.chain_blocks; ++b) {
      std::vector<int32_t>& t = tokens[static_cast<size_t>(c * opt.chain_blocks + b)];
      for (int32_t& x : t) x = static_cast<int32_t>(rng.next_u64() % 32000);
      BlockRecordMeta meta = record_meta_for(layout);
      meta.ns = ns;
      meta.parent_hash = parent;
      meta.block_hash = parent = hash_block(parent, t, ns.key());
      hashes[static_cast<size_t>(c)].push_back(meta.block_hash);
      puts[static_cast<size_t>(c)].push_back(TierPut{meta, t, std::span<const ConstByteSpan>(&segs[static_cast<size_t>(b)], 1), 0});
    }
  }

  // Write: pieces of half the write buffers, two in flight.
  const int64_t piece = std::max<int64_t>(1, o.write_buffer_bytes / slot / 2);
  int64_t t0 = clock.now_ns();
  int64_t written = 0;
  for (int64_t c = 0; c < opt.chains; ++c) {
    std::vector<TierOpId> ids;
    for (int64_t at = 0; at < opt.chain_blocks; at += piece) {
      const auto span = std::span<const TierPut>(puts[static_cast<size_t>(c)]).subspan(
          static_cast<size_t>(at), static_cast<size_t>(std::min(piece, opt.chain_blocks - at)));
      ids.push_back(tier->put(span));
      if (ids.size() == 2) {
        written += wait_all(*tier, ids);
        ids.clear();
      }
    }
    written += wait_all(*tier, ids);
  }
  const double write_s = static_cast<double>(clock.now_ns() - t0) * 1e-9;
  if (written != opt.chains * opt.chain_blocks) {
    std::fprintf(stderr, "only %lld of %lld blocks written: %s\n", static_cast<long long>(written),
                 static_cast<long long>(opt.chains * opt.chain_blocks), tier->disabled_reason().c_str());
    return 1;
  }

  // Restart: the index is rebuilt from the files.
  tier.reset();
  t0 = clock.now_ns();
  tier = DiskTier::create(o, clock, logger).value();
  const double scan_s = static_cast<double>(clock.now_ns() - t0) * 1e-9;
  const DiskTierInfo info = tier->info();

  // Promote: each chain into pool blocks, one chain at a time and two at a time.
  auto pool = BlockPool::create(layout, 2 * opt.chain_blocks).value();
  std::vector<std::vector<ByteSpan>> dest(static_cast<size_t>(2 * opt.chain_blocks), std::vector<ByteSpan>(24));
  std::vector<std::vector<int32_t>> tokens_out(static_cast<size_t>(2 * opt.chain_blocks), std::vector<int32_t>(16));
  for (int64_t b = 0; b < 2 * opt.chain_blocks; ++b) pool.block_segments(static_cast<int32_t>(b), dest[static_cast<size_t>(b)]);
  auto gets_for = [&](int64_t chain, int64_t half) {
    std::vector<TierGet> g;
    for (int64_t b = 0; b < opt.chain_blocks; ++b) {
      const size_t d = static_cast<size_t>(half * opt.chain_blocks + b);
      g.push_back(TierGet{hashes[static_cast<size_t>(chain)][static_cast<size_t>(b)], ns, dest[d], tokens_out[d]});
    }
    return g;
  };
  const double chain_bytes = static_cast<double>(opt.chain_blocks * info.record_bytes);
  // fio on the first slot file (the same bytes the tier reads), interleaved with the tier's runs
  // so that both see the same state of a noisy (virtual) disk.
  const std::string file0 = disk_tier_file_path(opt.dir, 0);
  const int64_t fio_bytes = std::min<int64_t>(info.slots_per_file, info.num_slots) * slot;
  const int64_t large = opt.max_request_bytes / slot * slot;
  std::vector<double> one_bw, two_bw, cpu_per_gb;
  std::vector<double> fio_runs[4];  // {one slot, tier request} x {plain, fixed buffers}
  auto run_fio = [&](int which) {
    fio_runs[which].push_back(fio_read(file0, fio_bytes, which % 2 == 0 ? slot : large, which % 2 == 0 ? opt.queue_depth : 16, which >= 2));
  };
  for (int run = 0; run < opt.runs; ++run) {
    run_fio(0);
    run_fio(2);
    for (int in_flight : {1, 2}) {
      std::vector<int64_t> order(static_cast<size_t>(opt.chains));
      for (int64_t c = 0; c < opt.chains; ++c) order[static_cast<size_t>(c)] = c;
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next_u64() % i]);
      const double cpu0 = cpu_seconds();
      t0 = clock.now_ns();
      int64_t got = 0;
      for (size_t i = 0; i < order.size(); i += static_cast<size_t>(in_flight)) {
        std::vector<std::vector<TierGet>> gets;
        std::vector<TierOpId> ids;
        for (int k = 0; k < in_flight && i + static_cast<size_t>(k) < order.size(); ++k) gets.push_back(gets_for(order[i + k], k));
        for (const auto& g : gets) ids.push_back(tier->get(g));
        got += wait_all(*tier, ids);
      }
      const double s = static_cast<double>(clock.now_ns() - t0) * 1e-9;
      if (got != opt.chains * opt.chain_blocks) {
        std::fprintf(stderr, "only %lld blocks read back\n", static_cast<long long>(got));
        return 1;
      }
      const double bw = chain_bytes * static_cast<double>(opt.chains) / s;
      (in_flight == 1 ? one_bw : two_bw).push_back(bw);
      if (in_flight == 1) cpu_per_gb.push_back((cpu_seconds() - cpu0) / (chain_bytes * static_cast<double>(opt.chains) * 1e-9));
      if (in_flight == 1) {
        run_fio(1);
        run_fio(3);
      }
    }
  }
  const DiskIoStats io = tier->io_stats();
  const TierStats st = tier->stats();
  tier.reset();
  double fio_bw[4], best_fio = -1;
  for (int i = 0; i < 4; ++i) best_fio = std::max(best_fio, fio_bw[i] = median(fio_runs[i]));

  const double gb = 1e9;
  std::printf("disk tier, llama-110m f16 blocks (record %lld B, slot %lld B), %s, %s through %s (depth %d), "
              "%lld chains x %lld blocks = %.0f MB, median of %d\n",
              static_cast<long long>(info.record_bytes), static_cast<long long>(slot), opt.dir.c_str(),
              info.direct_io ? "O_DIRECT" : "buffered", info.backend.c_str(), opt.queue_depth,
              static_cast<long long>(opt.chains), static_cast<long long>(opt.chain_blocks),
              chain_bytes * static_cast<double>(opt.chains) / 1e6, opt.runs);
  std::printf("| reader | request size | GB/s | vs best fio |\n|---|---:|---:|---:|\n");
  auto row = [&](const char* what, const std::string& req, double bw) {
    if (bw < 0) {
      std::printf("| %s | %s | (no fio) | |\n", what, req.c_str());
    } else {
      std::printf("| %s | %s | %.2f | %s |\n", what, req.c_str(), bw / gb,
                  best_fio > 0 ? (std::to_string(static_cast<int>(100 * bw / best_fio + 0.5)) + "%").c_str() : "");
    }
  };
  const std::string qd = "iodepth " + std::to_string(opt.queue_depth);
  row(("fio seq read, bs = one slot, " + qd).c_str(), format_bytes(slot), fio_bw[0]);
  row("fio seq read, bs = tier request, iodepth 16", format_bytes(large), fio_bw[1]);
  row(("fio seq read, bs = one slot, " + qd + ", --fixedbufs --registerfiles").c_str(), format_bytes(slot), fio_bw[2]);
  row("fio seq read, bs = tier request, iodepth 16, --fixedbufs --registerfiles", format_bytes(large), fio_bw[3]);
  row("tier get, 1 chain of 119 blocks at a time", "<= " + format_bytes(opt.max_request_bytes), median(one_bw));
  row("tier get, 2 chains at a time", "<= " + format_bytes(opt.max_request_bytes), median(two_bw));
  std::printf("\nwrite (put, two 56-block pieces in flight): %.2f GB/s; restart scan of %lld slots: %.1f ms, %lld records "
              "found; tier CPU per GB read (verify + copy): %.2f s; %lld read requests for %lld blocks\n",
              chain_bytes * static_cast<double>(opt.chains) / write_s / gb, static_cast<long long>(info.num_slots),
              scan_s * 1e3, static_cast<long long>(info.records_found), median(cpu_per_gb),
              static_cast<long long>(io.read_requests), static_cast<long long>(st.get_blocks));
  if (!opt.keep) {
    for (int64_t f = 0; f < info.num_files; ++f) std::filesystem::remove(disk_tier_file_path(opt.dir, f));
  }
  return 0;
}
