// The scheduler tests' bare pool: a tiny KV layout, token runs and a fixture that does what the
// serving loop does with a plan, minus the forward pass.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/scheduler.h"

namespace pagoda::engine::scheduler_testing {

constexpr int64_t kBlock = 4;

inline kvcache::KvLayout layout() {
  kvcache::KvLayout l;
  l.n_layer = 1;
  l.n_kv_head = 1;
  l.head_dim = 4;
  l.block_size = kBlock;
  return l;
}

inline std::vector<int32_t> tokens(int64_t n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct Fixture {
  explicit Fixture(int64_t num_blocks, SchedulerOptions o)
      : pool(kvcache::BlockPool::create(layout(), num_blocks).value()), bm(pool), sched(bm, o) {}
  // What the serving loop does with a plan (minus the forward pass): append + commit, and a
  // "sampled" token for every sequence that reached its end.
  void run(const StepPlan& plan, bool sample = true) {
    for (const ScheduledSeq& e : plan.scheduled) {
      copies.clear();
      slots.resize(e.n_tokens);
      ASSERT_TRUE(bm.append(e.seq->kv, std::span<const int32_t>(e.seq->tokens).subspan(e.begin, e.n_tokens), slots, copies));
      bm.commit(e.seq->kv);
    }
    for (const ScheduledSeq& e : plan.scheduled) {
      if (sample && e.completes()) e.seq->tokens.push_back(1000 + static_cast<int32_t>(e.seq->tokens.size()));
    }
    bm.check_integrity();
  }
  kvcache::BlockPool pool;
  kvcache::BlockManager bm;
  Scheduler sched;
  std::vector<int64_t> slots;
  std::vector<kvcache::BlockCopy> copies;
};

inline SchedulerOptions options(int64_t seqs, int64_t tokens, int64_t watermark = 0) {
  SchedulerOptions o;
  o.max_num_seqs = seqs;
  o.max_num_batched_tokens = tokens;
  o.watermark_blocks = watermark;
  return o;
}

}  // namespace pagoda::engine::scheduler_testing
