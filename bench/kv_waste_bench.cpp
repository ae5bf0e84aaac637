// KV memory waste under a mixed-length workload: paged blocks of 8/16/32 tokens vs
// preallocating every sequence's maximum length (what a contiguous per-slot cache does).
//   waste = (allocated token slots - used token slots) / allocated token slots
// Sequences are grown token by token through the real BlockManager (prompt in one append,
// then one append per generated token) and sampled at random moments of their life.
// Fixed seed; prints one table.
#include <cstdio>
#include <vector>

#include "core/rng.h"
#include "kvcache/block_manager.h"

using namespace pagoda;

int main() {
  constexpr int kSequences = 2000;
  constexpr int64_t kMaxLen = 4096;  // the context a contiguous cache must reserve per slot
  struct Request {
    int64_t prompt, output;
  };
  Rng rng(7);
  std::vector<Request> requests;
  for (int i = 0; i < kSequences; ++i) {
    // Mixed: short chats, medium documents, a few long ones (log-uniform-ish prompt lengths).
    const double u = rng.uniform();
    const int64_t prompt = u < 0.6 ? 16 + rng.next_u64() % 240 : u < 0.9 ? 256 + rng.next_u64() % 1280 : 1536 + rng.next_u64() % 2048;
    const int64_t output = 1 + rng.next_u64() % std::min<int64_t>(512, kMaxLen - prompt);
    requests.push_back({prompt, output});
  }
  std::printf("| layout | allocated token slots | used token slots | waste |\n|---|---:|---:|---:|\n");
  int64_t used_total = 0;
  for (int64_t block_size : {8, 16, 32}) {
    kvcache::KvLayout layout;
    layout.n_layer = 1;
    layout.n_kv_head = 1;
    layout.head_dim = 2;
    layout.block_size = block_size;
    auto pool = kvcache::BlockPool::create(layout, kSequences * kMaxLen / block_size);
    if (!pool.is_ok()) return 1;
    kvcache::BlockManager manager(*pool);
    std::vector<int64_t> slots(kMaxLen);
    int64_t allocated = 0, used = 0;
    Rng when(11);
    for (const Request& r : requests) {
      const kvcache::SeqId s = manager.add_sequence(kMaxLen);
      // Observe the sequence at a random point of its generation.
      const int64_t observed_output = 1 + static_cast<int64_t>(when.next_u64() % r.output);
      if (!manager.append(s, r.prompt, slots)) return 1;
      for (int64_t t = 0; t < observed_output; ++t) {
        if (!manager.append(s, 1, slots)) return 1;
      }
      used += manager.length(s);
      allocated += static_cast<int64_t>(manager.block_table(s).size()) * block_size;
      manager.free_sequence(s);
    }
    used_total = used;
    std::printf("| paged, block %lld | %lld | %lld | %.2f%% |\n", static_cast<long long>(block_size),
                static_cast<long long>(allocated), static_cast<long long>(used), 100.0 * (allocated - used) / allocated);
  }
  const int64_t prealloc = static_cast<int64_t>(kSequences) * kMaxLen;
  std::printf("| preallocated max length (%lld) | %lld | %lld | %.2f%% |\n", static_cast<long long>(kMaxLen),
              static_cast<long long>(prealloc), static_cast<long long>(used_total),
              100.0 * (prealloc - used_total) / prealloc);
  return 0;
}
