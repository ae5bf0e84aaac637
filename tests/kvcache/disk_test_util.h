// Helpers for the disk tier tests: a temporary directory, chains of random blocks, pool-block
// destinations, driving ops to completion, capturing the log.
#pragma once

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kvcache/disk_tier.h"
#include "manual_io.h"

namespace pagoda::kvcache::disk_test {

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "pagoda-disk-XXXXXX";
    CHECK(::mkdtemp(tmpl.data()) != nullptr) << "mkdtemp " << tmpl;
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

inline KvLayout small_layout(kernels::KvDType dtype = kernels::KvDType::kF32, int64_t block_size = 4) {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 2;
  l.head_dim = 8;
  l.block_size = block_size;
  l.dtype = dtype;
  return l;
}

inline constexpr KvNamespace kNs{101, 202, 303};

inline int64_t slot_bytes_of(const KvLayout& l) {
  return (record_bytes(record_meta_for(l)) + kIoAlign - 1) / kIoAlign * kIoAlign;
}

inline DiskTierOptions options_for(const std::string& dir, const KvLayout& l, int64_t capacity_blocks,
                                   KvNamespace ns = kNs) {
  DiskTierOptions o;
  o.dir = dir;
  o.layout = l;
  o.capacity_bytes = capacity_blocks * slot_bytes_of(l);
  o.model_fingerprint = ns.model_fingerprint;
  o.kv_format = ns.kv_format;
  o.write_buffer_bytes = 16 * slot_bytes_of(l);
  o.read_buffer_bytes = 16 * slot_bytes_of(l);
  return o;
}

struct TestBlock {
  BlockRecordMeta meta;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;  // [payload_bytes]
  std::vector<ConstByteSpan> segs;  // the payload in two uneven pieces
};

// n chained blocks from `parent`, their tokens and payload random from `seed`.
inline std::vector<TestBlock> make_chain(const KvLayout& l, int n, uint64_t seed, KvNamespace ns = kNs,
                                         BlockHash parent = kRootBlockHash) {
  Rng rng(seed);
  std::vector<TestBlock> chain(static_cast<size_t>(n));
  for (TestBlock& b : chain) {
    b.meta = record_meta_for(l);
    b.meta.ns = ns;
    for (int64_t t = 0; t < l.block_size; ++t) b.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 32000));
    b.meta.parent_hash = parent;
    b.meta.block_hash = hash_block(parent, b.tokens, ns.key());
    parent = b.meta.block_hash;
    b.payload.resize(static_cast<size_t>(b.meta.payload_bytes));
    for (uint8_t& x : b.payload) x = static_cast<uint8_t>(rng.next_u64());
    const size_t cut = b.payload.size() / 3;
    b.segs = {{b.payload.data(), cut}, {b.payload.data() + cut, b.payload.size() - cut}};
  }
  return chain;
}

inline std::vector<TierPut> puts_of(const std::vector<TestBlock>& chain, int32_t priority = 0) {
  std::vector<TierPut> puts;
  for (const TestBlock& b : chain) puts.push_back(TierPut{b.meta, b.tokens, b.segs, priority});
  return puts;
}

inline std::vector<BlockHash> hashes_of(const std::vector<TestBlock>& chain) {
  std::vector<BlockHash> h;
  for (const TestBlock& b : chain) h.push_back(b.meta.block_hash);
  return h;
}

// A pool block's segments (K then V per layer), prefilled with a sentinel.
struct Dest {
  std::vector<uint8_t> bytes;
  std::vector<ByteSpan> segs;
  std::vector<int32_t> tokens;
  explicit Dest(const KvLayout& l) : bytes(static_cast<size_t>(l.bytes_per_block()), 0xEE), tokens(l.block_size, -1) {
    uint8_t* p = bytes.data();
    for (int64_t layer = 0; layer < l.n_layer; ++layer) {
      segs.push_back({p, static_cast<size_t>(l.k_block_bytes())});
      p += l.k_block_bytes();
      segs.push_back({p, static_cast<size_t>(l.v_block_bytes())});
      p += l.v_block_bytes();
    }
  }
  Dest(const Dest&) = delete;  // segs point into bytes
  Dest(Dest&&) noexcept = default;  // moving keeps the heap buffer, so segs stay valid
  bool holds(const TestBlock& b) const { return tokens == b.tokens && bytes == b.payload; }
  bool untouched() const {
    for (uint8_t x : bytes) {
      if (x != 0xEE) return false;
    }
    return true;
  }
};

inline std::vector<Dest> dests_for(const KvLayout& l, size_t n) {
  std::vector<Dest> d;
  for (size_t i = 0; i < n; ++i) d.emplace_back(l);
  return d;
}

inline std::vector<TierGet> gets_of(const std::vector<TestBlock>& chain, std::vector<Dest>& dests, KvNamespace ns = kNs) {
  std::vector<TierGet> gets;
  for (size_t i = 0; i < chain.size(); ++i) {
    gets.push_back(TierGet{chain[i].meta.block_hash, ns, dests[i].segs, dests[i].tokens});
  }
  return gets;
}

// Polls until op `id` completes: each round completes every pending request of `io` (nullptr:
// a real backend, polled until its I/O is done). Other completions go to `others`.
inline TierCompletion finish(DiskTier& tier, TierOpId id, ManualIo* io, std::vector<TierCompletion>* others = nullptr) {
  std::vector<TierCompletion> out;
  for (;;) {
    out.clear();
    tier.poll(out);
    tier.check_integrity();
    std::optional<TierCompletion> mine;
    for (const TierCompletion& c : out) {
      if (c.op == id) {
        mine = c;
      } else if (others != nullptr) {
        others->push_back(c);
      }
    }
    if (mine) return *mine;
    if (io != nullptr) {
      CHECK(io->num_pending() > 0) << "op " << id << " waits for nothing";
      io->complete_all();
    } else {
      sched_yield();
    }
  }
}

// finish() for several ops at once.
inline std::map<TierOpId, TierCompletion> finish_all(DiskTier& tier, const std::vector<TierOpId>& ids, ManualIo* io) {
  std::map<TierOpId, TierCompletion> done;
  std::vector<TierCompletion> out;
  while (done.size() < ids.size()) {
    out.clear();
    tier.poll(out);
    tier.check_integrity();
    for (const TierCompletion& c : out) done[c.op] = c;
    if (done.size() == ids.size()) break;
    if (io != nullptr) {
      CHECK(io->num_pending() > 0) << "ops wait for nothing";
      io->complete_all();
    } else {
      sched_yield();
    }
  }
  return done;
}

// The log of a tier, captured.
struct LogCapture {
  FILE* file = std::tmpfile();
  Logger logger{LogLevel::kInfo, file};
  ~LogCapture() { std::fclose(file); }
  std::string text() const {
    std::fflush(file);
    std::string s;
    std::rewind(file);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) s.append(buf, n);
    return s;
  }
  int64_t count(const std::string& needle) const {
    const std::string s = text();
    int64_t n = 0;
    for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
    return n;
  }
};

inline std::unique_ptr<DiskTier> open_tier(const DiskTierOptions& o, const Clock& clock, const Logger& logger,
                                           std::unique_ptr<IoBackend> io = nullptr) {
  Result<std::unique_ptr<DiskTier>> tier = DiskTier::create(o, clock, logger, std::move(io));
  CHECK(tier.is_ok()) << tier.status().message();
  return std::move(tier).value();
}

}  // namespace pagoda::kvcache::disk_test
