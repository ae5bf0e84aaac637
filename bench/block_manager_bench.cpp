// Block manager bookkeeping: no KV bytes are touched, only tables, ref counts, the prefix
// index and the eviction heap (block size 16, a pool of 8192 blocks).
//
//   block_manager_bench --benchmark_min_time=0.1
//
//   AppendFree/n          add a sequence, append n tokens (ids unknown: no caching), free it
//   AppendCommitFree/n    the same with token ids and commit: every full block is registered,
//                         cached at free, and later evicted (LRU) to make room
//   MatchPrefix/4096      match_prefix of a cached 4,096-token prompt (256 blocks), guard dropped
//   AdmitCached/4096      match + add_sequence + adopt + free of that prompt
//   Fork/4096             fork of a 4,096-token sequence + free of the child
//   HashBlock             hash_block of one 16-token block
#include <benchmark/benchmark.h>

#include <vector>

#include "core/rng.h"
#include "kvcache/block_manager.h"

namespace pagoda::kvcache {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kNumBlocks = 8192;

KvLayout bench_layout() {
  KvLayout l;
  l.n_layer = 1;
  l.n_kv_head = 1;
  l.head_dim = 4;
  l.block_size = kBlockSize;
  return l;
}

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % 32000);
  return tokens;
}

struct Setup {
  Setup() : pool(BlockPool::create(bench_layout(), kNumBlocks).value()), m(pool) {}
  BlockPool pool;
  BlockManager m;
};

void AppendFree(benchmark::State& state) {
  const int64_t n = state.range(0);
  Setup s;
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (auto _ : state) {
    const SeqId seq = s.m.add_sequence(n);
    if (!s.m.append(seq, n, slots)) state.SkipWithError("pool full");
    s.m.free_sequence(seq);
  }
  state.SetItemsProcessed(state.iterations() * ((n + kBlockSize - 1) / kBlockSize));  // blocks
}
BENCHMARK(AppendFree)->Arg(16)->Arg(4096);

void AppendCommitFree(benchmark::State& state) {
  const int64_t n = state.range(0);
  Setup s;
  std::vector<int32_t> tokens = random_tokens(n, 1);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  std::vector<BlockCopy> copies;
  int32_t round = 0;
  for (auto _ : state) {
    tokens[0] = round++;  // a new prefix every time: the cache fills, then evicts
    const SeqId seq = s.m.add_sequence(n);
    copies.clear();
    if (!s.m.append(seq, tokens, slots, copies)) state.SkipWithError("pool full");
    s.m.commit(seq);
    s.m.free_sequence(seq);
  }
  state.SetItemsProcessed(state.iterations() * ((n + kBlockSize - 1) / kBlockSize));
  state.counters["evictions"] = static_cast<double>(s.m.stats().num_evictions);
}
BENCHMARK(AppendCommitFree)->Arg(16)->Arg(4096);

// A cached prompt of n tokens (+1, the token that is always computed).
std::vector<int32_t> cache_prompt(Setup& s, int64_t n) {
  std::vector<int32_t> prompt = random_tokens(n + 1, 2);
  std::vector<int64_t> slots(prompt.size());
  std::vector<BlockCopy> copies;
  const SeqId seq = s.m.add_sequence(n + 1);
  if (!s.m.append(seq, prompt, slots, copies)) return {};
  s.m.commit(seq);
  s.m.free_sequence(seq);
  return prompt;
}

void MatchPrefix(benchmark::State& state) {
  Setup s;
  const std::vector<int32_t> prompt = cache_prompt(s, state.range(0));
  for (auto _ : state) {
    PrefixMatch hit = s.m.match_prefix(prompt, KvNamespace{});
    benchmark::DoNotOptimize(hit.num_tokens());
    if (hit.num_tokens() != state.range(0)) state.SkipWithError("miss");
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));  // tokens
}
BENCHMARK(MatchPrefix)->Arg(4096);

void AdmitCached(benchmark::State& state) {
  Setup s;
  const std::vector<int32_t> prompt = cache_prompt(s, state.range(0));
  for (auto _ : state) {
    PrefixMatch hit = s.m.match_prefix(prompt, KvNamespace{});
    const SeqId seq = s.m.add_sequence(static_cast<int64_t>(prompt.size()));
    s.m.adopt(seq, std::move(hit));
    s.m.free_sequence(seq);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(AdmitCached)->Arg(4096);

void Fork(benchmark::State& state) {
  Setup s;
  const std::vector<int32_t> tokens = random_tokens(state.range(0), 3);
  std::vector<int64_t> slots(tokens.size());
  std::vector<BlockCopy> copies;
  const SeqId parent = s.m.add_sequence(state.range(0));
  if (!s.m.append(parent, tokens, slots, copies)) state.SkipWithError("pool full");
  s.m.commit(parent);
  for (auto _ : state) {
    const SeqId child = s.m.fork(parent);
    s.m.free_sequence(child);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(Fork)->Arg(4096);

void HashBlock(benchmark::State& state) {
  const std::vector<int32_t> tokens = random_tokens(kBlockSize, 4);
  BlockHash h = kRootBlockHash;
  for (auto _ : state) {
    h = hash_block(h, tokens, 12345);
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(HashBlock);

}  // namespace
}  // namespace pagoda::kvcache

BENCHMARK_MAIN();
