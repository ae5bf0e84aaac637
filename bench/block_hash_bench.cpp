// The cost of naming blocks: xxh64 vs SHA-256 chains (--kv-hash), per token and per block of 16,
// over a prompt of 64 Ki tokens, hashed block by block as the block manager does. Median of 7
// runs. Run: build/bin/block_hash_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kvcache/block_hash.h"

using namespace pagoda::kvcache;

int main() {
  constexpr int64_t kTokens = 1 << 16, kBlock = 16;
  std::vector<int32_t> tokens(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) tokens[i] = static_cast<int32_t>((i * 2654435761u) % 128000);
  const uint64_t key = KvNamespace{1, 2, 3}.key();
  double xxh_ns = 0;
  for (BlockHashScheme scheme : {BlockHashScheme::kXxh64, BlockHashScheme::kSha256}) {
    const BlockHashFn fn = block_hash_fn(scheme);
    std::vector<double> runs;
    BlockHash sink = 0;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int rep = 0; rep < 16; ++rep) {
        BlockHash parent = kRootBlockHash;
        for (int64_t b = 0; b + kBlock <= kTokens; b += kBlock) {
          parent = fn(parent, std::span<const int32_t>(tokens.data() + b, kBlock), key);
        }
        sink ^= parent;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      runs.push_back(s * 1e9 / (16.0 * kTokens));
    }
    std::sort(runs.begin(), runs.end());
    const double ns = runs[runs.size() / 2];
    if (scheme == BlockHashScheme::kXxh64) xxh_ns = ns;
    std::printf("%-24s %6.2f ns/token  %7.1f ns/block of %lld  (%.1fx xxh64)  [sink %llx]\n",
                std::string(block_hash_scheme_name(scheme)).c_str(), ns, ns * kBlock, static_cast<long long>(kBlock),
                ns / xxh_ns, static_cast<unsigned long long>(sink & 0xf));
  }
  return 0;
}
