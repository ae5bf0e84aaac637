// Test helper: the stand-in KV of every position of a token sequence, for the randomised
// block manager and coordinator tests (a stand-in forward pass writes it; a wrong hit, a missed
// copy or an evicted block in use then reads as wrong bytes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/block_hash.h"

namespace pagoda::kvcache::testing {

// A rolling hash of the namespace and the tokens up to each position.
inline std::vector<uint64_t> expected_kv(const KvNamespace& ns, std::span<const int32_t> tokens) {
  std::vector<uint64_t> kv;
  kv.reserve(tokens.size());
  uint64_t h = ns.key();
  for (int32_t t : tokens) {
    h = (h ^ static_cast<uint64_t>(t)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    kv.push_back(h);
  }
  return kv;
}

}  // namespace pagoda::kvcache::testing
