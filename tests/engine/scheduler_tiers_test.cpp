// The scheduler over a pool with a tier below it (a FakeTier whose completions the test drives).
// A sequence whose tier load finishes in the same step that preempts it is not among the plan's
// loaded sequences (found by bench/soak.py --faults: the serving loop read the block table of a
// preempted sequence, "unknown sequence -1"). A probe answered after the pool hit changed lines
// its runs up with the new hit.
#include <gtest/gtest.h>

#include <numeric>

#include "core/clock.h"
#include "core/log.h"
#include "engine/scheduler.h"
#include "fake_tier.h"
#include "kvcache/tier_stack.h"

namespace pagoda::engine {
namespace {

kvcache::KvLayout layout4() {
  kvcache::KvLayout l;
  l.n_layer = 1;
  l.n_kv_head = 1;
  l.head_dim = 2;
  l.block_size = 4;
  return l;
}

std::vector<int32_t> tokens(int64_t n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct TierFixture {
  explicit TierFixture(int64_t num_blocks)
      : pool(kvcache::BlockPool::create(layout4(), num_blocks).value()),
        bm(pool),
        stack(pool, kvcache::OffloadMode::kWriteThrough, clock, logger) {
    auto tier = std::make_unique<kvcache::testing::FakeTier>("fake", layout4(), 64);
    fake = tier.get();
    stack.add_tier(std::move(tier));
    bm.add_listener(&stack);
    SchedulerOptions o;
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = 64;
    o.tiers = &stack;
    sched.emplace(bm, o);
  }
  ~TierFixture() {
    sched.reset();
    bm.remove_listener(&stack);
  }
  // The serving loop minus the forward pass: append + commit, a "sampled" token at each end.
  void run(const StepPlan& plan) {
    for (const ScheduledSeq& e : plan.scheduled) {
      std::vector<int64_t> slots(static_cast<size_t>(e.n_tokens));
      std::vector<kvcache::BlockCopy> copies;
      ASSERT_TRUE(bm.append(e.seq->kv, std::span<const int32_t>(e.seq->tokens).subspan(e.begin, e.n_tokens), slots, copies));
      bm.commit(e.seq->kv);
    }
    for (const ScheduledSeq& e : plan.scheduled) {
      if (e.completes()) e.seq->tokens.push_back(1000 + static_cast<int32_t>(e.seq->tokens.size()));
    }
    bm.check_integrity();
  }
  ManualClock clock;
  Logger logger{LogLevel::kError};
  kvcache::BlockPool pool;
  kvcache::BlockManager bm;
  kvcache::TierStack stack;
  kvcache::testing::FakeTier* fake = nullptr;
  std::optional<Scheduler> sched;
};

// `prompt` computed once (its whole blocks written through to the fake tier), then removed and
// gone from the pool.
void seed_tier(TierFixture& f, const std::vector<int32_t>& prompt) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  SchedSequence& x = f.sched->add({0, 0, 0}, prompt, n, 1, {});
  for (int i = 0; i < 4 && !(x.running() && x.fed == n); ++i) {  // its probe (a miss) first
    f.fake->complete_all();
    f.run(f.sched->schedule());
  }
  ASSERT_TRUE(x.running() && x.fed == n);
  f.sched->remove(x.id);
  for (int i = 0; i < 4; ++i) {
    f.stack.poll();
    f.fake->complete_all();
  }
  ASSERT_EQ(f.fake->stats().used_blocks, n / 4);
  f.bm.evict_all_cached();
  ASSERT_EQ(f.pool.num_in_use(), 0);
}

void finish(TierFixture& f, std::initializer_list<SchedSequence*> seqs) {
  for (SchedSequence* s : seqs) f.sched->remove(s->id);
  f.fake->complete_all();
  f.stack.poll();
  f.stack.check_integrity();
  EXPECT_EQ(f.pool.num_in_use(), 0);
}

TEST(SchedulerTiers, ASequencePreemptedInTheStepItsLoadFinishesIsNotLoaded) {
  TierFixture f(5);  // 5 blocks of 4 tokens
  const std::vector<int32_t> prompt = tokens(9, 1);  // 2 whole blocks + 1 token
  seed_tier(f, prompt);
  if (::testing::Test::HasFatalFailure()) return;
  // A (priority 1) decodes; B (priority 0, the later victim) loads the prompt's 2 blocks.
  SchedSequence& a = f.sched->add({1, 1, 0}, tokens(6, 100), 64, 1, {});
  for (int i = 0; i < 4 && !a.running(); ++i) {  // A: 6 tokens, 2 blocks
    f.fake->complete_all();
    f.run(f.sched->schedule());
  }
  ASSERT_TRUE(a.running());
  SchedSequence& b = f.sched->add({0, 2, 0}, prompt, 64, 1, {});
  bool loading_seen = false, case_seen = false;
  for (int step = 0; step < 12 && !case_seen; ++step) {
    if (b.loading()) {
      loading_seen = true;
      // Its get completes only when A needs the last free block: the load finishes in the
      // step that must preempt someone, and B (not loading any more) is the victim.
      const int64_t need = (static_cast<int64_t>(a.tokens.size()) - 1) / 4 + 1;
      if (need > static_cast<int64_t>(f.bm.block_table(a.kv).size())) f.fake->complete_all();
    } else {
      f.fake->complete_all();  // the probe
    }
    const StepPlan& plan = f.sched->schedule();
    for (const SchedSequence* s : plan.loaded) EXPECT_TRUE(s->running()) << "a preempted sequence among the loaded";
    case_seen = std::find(plan.preempted.begin(), plan.preempted.end(), &b) != plan.preempted.end() && loading_seen;
    f.run(plan);
  }
  EXPECT_TRUE(loading_seen) << "B never loaded from the tier";
  EXPECT_TRUE(case_seen) << "B was never preempted in the step its load finished";
  EXPECT_TRUE(a.running());
  finish(f, {&a, &b});
}

// B's probe is asked while the pool holds none of B, and answered after A (B's first 2 blocks)
// loaded them: B loads only the 2 blocks after the pool hit (seen in CI as a second instance
// recomputing a block the Redis pool held, when its probe came back after a concurrent request's).
TEST(SchedulerTiers, AProbeAnsweredAfterThePoolGainedBlocksLoadsOnlyTheRest) {
  TierFixture f(16);
  const std::vector<int32_t> prompt = tokens(17, 1);  // 4 whole blocks + 1 token
  seed_tier(f, prompt);
  if (::testing::Test::HasFatalFailure()) return;
  SchedSequence& a = f.sched->add({0, 1, 0}, std::vector<int32_t>(prompt.begin(), prompt.begin() + 9), 64, 1, {});
  f.run(f.sched->schedule());  // A probes
  ASSERT_EQ(f.fake->num_queued(), 1);
  f.fake->complete_next();
  f.run(f.sched->schedule());  // A loads its 2 blocks
  ASSERT_TRUE(a.loading());
  SchedSequence& b = f.sched->add({0, 2, 0}, prompt, 64, 1, {});
  f.run(f.sched->schedule());  // B probes (A's blocks are not in yet)
  ASSERT_FALSE(b.running());
  ASSERT_EQ(f.fake->num_queued(), 2);
  f.fake->complete_next();     // A's get
  f.run(f.sched->schedule());  // A's blocks are in; B's probe is not answered
  ASSERT_FALSE(a.loading());
  ASSERT_FALSE(b.running());
  f.fake->complete_next();     // B's probe: 4 blocks, 2 of them in the pool now
  f.run(f.sched->schedule());
  ASSERT_TRUE(b.loading());
  f.fake->complete_all();
  f.run(f.sched->schedule());
  ASSERT_FALSE(b.loading());
  EXPECT_EQ(b.admitted_tier[0], 8);  // blocks 2 and 3
  EXPECT_EQ(b.admitted_cached, 16);
  EXPECT_EQ(f.fake->stats().used_blocks, 4);
  finish(f, {&a, &b});
}

// B's probe (from the 2 blocks the pool held) is answered after the pool lost them: the tiers
// are probed again from the new hit, and B loads all 4 blocks rather than recomputing them.
TEST(SchedulerTiers, AProbeAnsweredAfterThePoolLostBlocksProbesAgain) {
  TierFixture f(16);
  const std::vector<int32_t> prompt = tokens(17, 1);
  seed_tier(f, prompt);
  if (::testing::Test::HasFatalFailure()) return;
  SchedSequence& a = f.sched->add({0, 1, 0}, std::vector<int32_t>(prompt.begin(), prompt.begin() + 9), 9, 1, {});
  for (int i = 0; i < 6 && !(a.running() && a.fed == 9); ++i) {
    f.fake->complete_all();
    f.run(f.sched->schedule());
  }
  ASSERT_TRUE(a.running() && a.fed == 9);
  finish(f, {&a});
  SchedSequence& b = f.sched->add({0, 2, 0}, prompt, 64, 1, {});
  f.run(f.sched->schedule());  // B: 2 blocks in the pool, probes the 2 after them
  ASSERT_EQ(f.fake->num_queued(), 1);
  ASSERT_EQ(f.bm.evict_all_cached(), 2);
  f.fake->complete_next();
  f.run(f.sched->schedule());  // the runs start after a hit the pool no longer has: probe again
  EXPECT_FALSE(b.running());
  ASSERT_EQ(f.fake->num_queued(), 1);
  f.fake->complete_next();
  f.run(f.sched->schedule());
  ASSERT_TRUE(b.loading());
  f.fake->complete_all();
  f.run(f.sched->schedule());
  EXPECT_EQ(b.admitted_tier[0], 16);
  EXPECT_EQ(b.admitted_cached, 16);
  finish(f, {&b});
}

}  // namespace
}  // namespace pagoda::engine
