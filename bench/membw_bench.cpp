// Memory bandwidth of this machine: the denominator of the decode roofline
// (bench/run_side_by_side.sh divides the read bandwidth by the bytes read per decoded token).
//
// One anonymous buffer (default 1 GiB, far larger than any L3), mapped like Pagoda's own
// buffers (mmap + MADV_HUGEPAGE, best effort) and touched before timing. Three tests, each run
// with every thread count asked for (std::thread; each thread owns one contiguous slice):
//   read   sum of the whole buffer as 64-bit integers (AVX-512 / AVX2 / scalar, chosen at run
//          time); bytes counted = buffer size
//   copy   memcpy of the first half onto the second half; bytes counted = read + written
//          (STREAM's convention: 2 x half the buffer)
//   write  memset of the whole buffer; bytes counted = buffer size (any read-for-ownership
//          traffic the stores cause is not counted)
// Each (test, threads) is run --reps times; the table shows median, min and max GB/s
// (GB = 1e9 bytes). A benchmark, never a test (DESIGN.md rule 9).
//
//   build/bin/membw_bench [--size-mib 1024] [--reps 7] [--threads 1,2] [--no-hugepages] [--json]
// Stand-alone build: g++ -std=c++20 -O2 -pthread bench/membw_bench.cpp -o membw_bench
#include <sys/mman.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t size_bytes = size_t{1024} << 20;
  int reps = 7;
  std::vector<int> threads = {1, 2};
  bool hugepages = true;
  bool json = false;
};

[[noreturn]] void usage_error(const char* message) {
  std::fprintf(stderr,
               "error: %s\nusage: membw_bench [--size-mib N] [--reps N] [--threads 1,2] "
               "[--no-hugepages] [--json]\n",
               message);
  std::exit(2);
}

int parse_positive(const char* text, const char* what) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0 || v > (1L << 20)) usage_error(what);
  return static_cast<int>(v);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--size-mib") {
      o.size_bytes = size_t(parse_positive(value(), "--size-mib must be a positive integer")) << 20;
    } else if (a == "--reps") {
      o.reps = parse_positive(value(), "--reps must be a positive integer");
    } else if (a == "--threads") {
      o.threads.clear();
      std::string list = value();
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        o.threads.push_back(parse_positive(list.substr(pos, comma - pos).c_str(),
                                           "--threads must be a comma-separated list of counts"));
        pos = comma + 1;
      }
    } else if (a == "--no-hugepages") {
      o.hugepages = false;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: membw_bench [--size-mib N] [--reps N] [--threads 1,2] [--no-hugepages] [--json]\n");
      std::exit(0);
    } else {
      usage_error(("unknown argument " + a).c_str());
    }
  }
  return o;
}

// ---- read kernels: sum of 64-bit lanes; n_bytes is a multiple of 256. ----

__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, size_t n_bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n_bytes; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t s = 0;
  for (uint64_t v : lanes) s += v;
  return s;
}

__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n_bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n_bytes; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t sum_scalar(const uint8_t* p, size_t n_bytes) {  // auto-vectorized (SSE2) at -O2/-O3
  const auto* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < n_bytes / 8; i += 4) {
    s0 += q[i];
    s1 += q[i + 1];
    s2 += q[i + 2];
    s3 += q[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

using SumFn = uint64_t (*)(const uint8_t*, size_t);

SumFn pick_sum(const char** isa) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    *isa = "avx512";
    return sum_avx512;
  }
  if (__builtin_cpu_supports("avx2")) {
    *isa = "avx2";
    return sum_avx2;
  }
  *isa = "scalar";
  return sum_scalar;
}

enum class Test { kRead, kCopy, kWrite };
const char* test_name(Test t) { return t == Test::kRead ? "read" : t == Test::kCopy ? "copy" : "write"; }

std::atomic<uint64_t> g_sink{0};  // keeps the read sums alive

// One timed run: `num_threads` threads each do their slice; returns seconds from the release
// of the start flag until the last thread finishes.
double run_once(Test test, uint8_t* buf, size_t size, int num_threads, SumFn sum) {
  const size_t half = size / 2;
  // Slices are multiples of 4 KiB (and so of 256 bytes, as the sum kernels need).
  auto slice = [&](size_t total, int t) {
    size_t per = (total / num_threads) & ~size_t{4095};
    size_t begin = per * t;
    size_t end = (t == num_threads - 1) ? total : begin + per;
    return std::pair<size_t, size_t>{begin, end};
  };
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<Clock::time_point> ends(num_threads);
  std::vector<std::thread> workers;
  workers.reserve(num_threads);
  for (int t = 0; t < num_threads; ++t) {
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      if (test == Test::kRead) {
        auto [b, e] = slice(size, t);
        g_sink.fetch_add(sum(buf + b, e - b), std::memory_order_relaxed);
      } else if (test == Test::kCopy) {
        auto [b, e] = slice(half, t);
        std::memcpy(buf + half + b, buf + b, e - b);
      } else {
        auto [b, e] = slice(size, t);
        std::memset(buf + b, 0x5a + t, e - b);
      }
      ends[t] = Clock::now();
    });
  }
  while (ready.load() != num_threads) {
  }
  Clock::time_point start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& w : workers) w.join();
  Clock::time_point end = *std::max_element(ends.begin(), ends.end());
  return std::chrono::duration<double>(end - start).count();
}

struct Row {
  Test test;
  int threads;
  double median_gbps, min_gbps, max_gbps;
};

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  size_t size = (o.size_bytes + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  if (o.hugepages) madvise(mem, size, MADV_HUGEPAGE);  // best effort, as Pagoda's buffers do
  auto* buf = static_cast<uint8_t*>(mem);
  std::memset(buf, 0x5a, size);  // fault every page in before timing

  const char* isa = nullptr;
  SumFn sum = pick_sum(&isa);
  std::vector<Row> rows;
  for (Test test : {Test::kRead, Test::kCopy, Test::kWrite}) {
    for (int threads : o.threads) {
      const double bytes = test == Test::kCopy ? double(size / 2) * 2 : double(size);
      run_once(test, buf, size, threads, sum);  // warm-up
      std::vector<double> gbps;
      for (int r = 0; r < o.reps; ++r) gbps.push_back(bytes / run_once(test, buf, size, threads, sum) / 1e9);
      std::sort(gbps.begin(), gbps.end());
      size_t n = gbps.size();
      double median = n % 2 ? gbps[n / 2] : (gbps[n / 2 - 1] + gbps[n / 2]) / 2;
      rows.push_back({test, threads, median, gbps.front(), gbps.back()});
    }
  }

  double best_read = 0;
  for (const Row& r : rows)
    if (r.test == Test::kRead) best_read = std::max(best_read, r.median_gbps);

  FILE* table = o.json ? stderr : stdout;
  std::fprintf(table, "memory bandwidth: %.0f MiB anonymous buffer, %s read kernel, hugepages %s, %d reps\n\n",
               double(size) / (1 << 20), isa, o.hugepages ? "madvised" : "off", o.reps);
  std::fprintf(table, "| test | threads | median GB/s | min GB/s | max GB/s |\n|---|---:|---:|---:|---:|\n");
  for (const Row& r : rows)
    std::fprintf(table, "| %s | %d | %.2f | %.2f | %.2f |\n", test_name(r.test), r.threads, r.median_gbps,
                 r.min_gbps, r.max_gbps);
  if (o.json) {
    std::printf("{\"size_bytes\":%zu,\"reps\":%d,\"isa\":\"%s\",\"hugepages\":%s,\"statistic\":\"median\",\"gbps\":{",
                size, o.reps, isa, o.hugepages ? "true" : "false");
    bool first_test = true;
    for (Test test : {Test::kRead, Test::kCopy, Test::kWrite}) {
      std::printf("%s\"%s\":{", first_test ? "" : ",", test_name(test));
      first_test = false;
      bool first = true;
      for (const Row& r : rows) {
        if (r.test != test) continue;
        std::printf("%s\"%d\":%.3f", first ? "" : ",", r.threads, r.median_gbps);
        first = false;
      }
      std::printf("}");
    }
    std::printf("},\"read_gbps_best\":%.3f}\n", best_read);
  }
  munmap(mem, size);
  return 0;
}
