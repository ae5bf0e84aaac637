// Blocks, puts, gets and waits for the Redis tier tests: random KV blocks of a layout, gathered
// in BlockPool::block_segments order, and destinations to read them back into.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kvcache/block_hash.h"
#include "kvcache/block_record.h"
#include "kvcache/tier.h"

namespace pagoda::testing {

inline kvcache::KvLayout test_layout(kernels::KvDType dtype = kernels::KvDType::kF16, int64_t block_size = 16,
                                     kernels::KvLayoutKind kind = kernels::KvLayoutKind::kND) {
  kvcache::KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 2;
  l.head_dim = 16;
  l.block_size = block_size;
  l.dtype = dtype;
  l.layout = kind;
  return l;
}

inline kvcache::KvNamespace test_ns(uint64_t salt = 0) { return {0xfeedface12345678ULL, 0x0f16, salt}; }

struct TestBlock {
  kvcache::BlockRecordMeta meta;
  std::vector<int32_t> tokens;                   // [block_size]
  std::vector<std::vector<uint8_t>> segments;    // [2 x n_layer] K, V of each layer
  std::vector<kvcache::ConstByteSpan> views;

  std::vector<uint8_t> payload() const {
    std::vector<uint8_t> out;
    for (const auto& s : segments) out.insert(out.end(), s.begin(), s.end());
    return out;
  }
  // The record exactly as a tier writes it.
  std::vector<uint64_t> record() const {
    std::vector<uint64_t> words(static_cast<size_t>(kvcache::record_bytes(meta) + 7) / 8);
    kvcache::encode_block_record(meta, tokens, views, {reinterpret_cast<uint8_t*>(words.data()), static_cast<size_t>(kvcache::record_bytes(meta))});
    return words;
  }
};

// A chain of `n` blocks (real chained hashes) of random tokens and KV bytes. `exponent_like`
// makes every second byte one of a few values (the high byte of f16 KV), so codecs have work.
inline std::vector<TestBlock> make_chain(const kvcache::KvLayout& layout, const kvcache::KvNamespace& ns, int n,
                                         uint64_t seed, bool exponent_like = true) {
  Rng rng(seed);
  std::vector<TestBlock> chain(static_cast<size_t>(n));
  kvcache::BlockHash parent = kvcache::kRootBlockHash;
  for (TestBlock& b : chain) {
    b.meta = kvcache::record_meta_for(layout);
    b.meta.ns = ns;
    for (int64_t t = 0; t < layout.block_size; ++t) b.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 32000));
    b.meta.parent_hash = parent;
    b.meta.block_hash = kvcache::hash_block(parent, b.tokens, ns.key());
    parent = b.meta.block_hash;
    for (int64_t l = 0; l < layout.n_layer; ++l) {
      for (int64_t bytes : {layout.k_block_bytes(), layout.v_block_bytes()}) {
        std::vector<uint8_t> seg(static_cast<size_t>(bytes));
        for (size_t i = 0; i < seg.size(); ++i) {
          seg[i] = exponent_like && i % 2 == 1 ? static_cast<uint8_t>(0x38 + rng.next_u64() % 3) : static_cast<uint8_t>(rng.next_u64());
        }
        b.segments.push_back(std::move(seg));
      }
    }
    for (const auto& s : b.segments) b.views.emplace_back(s.data(), s.size());
  }
  return chain;
}

inline std::vector<kvcache::TierPut> puts_of(const std::vector<TestBlock>& blocks, size_t first = 0, size_t count = SIZE_MAX) {
  std::vector<kvcache::TierPut> puts;
  for (size_t i = first; i < blocks.size() && puts.size() < count; ++i) {
    kvcache::TierPut p;
    p.meta = blocks[i].meta;
    p.tokens = blocks[i].tokens;
    p.payload = blocks[i].views;
    puts.push_back(p);
  }
  return puts;
}

inline std::vector<kvcache::BlockHash> hashes_of(const std::vector<TestBlock>& blocks) {
  std::vector<kvcache::BlockHash> h;
  for (const TestBlock& b : blocks) h.push_back(b.meta.block_hash);
  return h;
}

// Where gets land: one block's segments and tokens, filled with a marker byte.
struct GetDest {
  std::vector<std::vector<uint8_t>> segments;
  std::vector<kvcache::ByteSpan> views;
  std::vector<int32_t> tokens;

  explicit GetDest(const kvcache::KvLayout& layout) {
    for (int64_t l = 0; l < layout.n_layer; ++l) {
      segments.emplace_back(static_cast<size_t>(layout.k_block_bytes()), 0xEE);
      segments.emplace_back(static_cast<size_t>(layout.v_block_bytes()), 0xEE);
    }
    for (auto& s : segments) views.emplace_back(s.data(), s.size());
    tokens.assign(static_cast<size_t>(layout.block_size), -1);
  }
  bool holds(const TestBlock& b) const {
    return tokens == b.tokens && [&] {
      for (size_t i = 0; i < segments.size(); ++i) {
        if (segments[i] != b.segments[i]) return false;
      }
      return true;
    }();
  }
  bool untouched() const {
    for (const auto& s : segments) {
      for (uint8_t c : s) {
        if (c != 0xEE) return false;
      }
    }
    return true;
  }
};

struct Gets {
  std::vector<GetDest> dests;
  std::vector<kvcache::TierGet> gets;
  Gets(const kvcache::KvLayout& layout, const std::vector<TestBlock>& blocks, const kvcache::KvNamespace& ns) {
    dests.reserve(blocks.size());
    for (const TestBlock& b : blocks) {
      dests.emplace_back(layout);
      kvcache::TierGet g;
      g.hash = b.meta.block_hash;
      g.ns = ns;
      g.dest = dests.back().views;
      g.tokens_out = dests.back().tokens;
      gets.push_back(g);
    }
  }
};

// Polls `tier` until op `id` completes. The wait on completion_fd is a safety net (a lost
// wake-up fails the test after 20 s instead of hanging it), never a sleep for correctness.
template <typename TierT>
kvcache::TierCompletion wait_op(TierT& tier, kvcache::TierOpId id) {
  std::vector<kvcache::TierCompletion> out;
  for (int rounds = 0; rounds < 2000; ++rounds) {
    tier.poll(out);
    for (const kvcache::TierCompletion& c : out) {
      if (c.op == id) return c;
    }
    pollfd pfd{tier.completion_fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 20'000) == 0) break;
  }
  ADD_FAILURE() << "op " << id << " never completed";
  return {};
}

// Polls until the tier's health settles: probes in flight finish (enabled() or a failed probe).
template <typename TierT>
void settle(TierT& tier, int64_t probes_before) {
  std::vector<kvcache::TierCompletion> out;
  for (int rounds = 0; rounds < 2000 && tier.redis_stats().probes == probes_before; ++rounds) {
    tier.poll(out);
    if (tier.redis_stats().probes != probes_before) break;
    pollfd pfd{tier.completion_fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 20'000) == 0) break;
  }
  tier.poll(out);
}

}  // namespace pagoda::testing
