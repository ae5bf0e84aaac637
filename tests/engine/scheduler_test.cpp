// The scheduling policy over a bare block pool (no model): chunk sizes, decode-first budgets,
// admission order and caps, the watermark, victims of preemption, forks and prefix hits.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

#include "engine/step_cost.h"
#include "scheduler_fixture.h"

namespace pagoda::engine {
namespace {

using namespace scheduler_testing;

TEST(Scheduler, LongPromptIsChunkedAndSharesStepsWithDecodes) {
  Fixture f(64, options(4, 8));
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(3, 10), 20, 1, {});
  const StepPlan& p1 = f.sched.schedule();
  ASSERT_EQ(p1.scheduled.size(), 1u);
  EXPECT_EQ(p1.scheduled[0].n_tokens, 3);
  EXPECT_TRUE(p1.scheduled[0].completes());
  f.run(p1);
  SchedSequence& b = f.sched.add({0, 1, 0}, tokens(20, 50), 30, 1, {});
  // a decodes one token; b's 20-token prompt gets the remaining 7, then 7, then 6 (+ a's decode).
  for (int64_t expect : {7, 7, 6}) {
    const StepPlan& p = f.sched.schedule();
    ASSERT_EQ(p.scheduled.size(), 2u);
    EXPECT_EQ(p.num_tokens, 1 + expect);
    for (const ScheduledSeq& e : p.scheduled) EXPECT_EQ(e.n_tokens, e.seq == &a ? 1 : expect);
    f.run(p);
  }
  EXPECT_EQ(f.bm.length(b.kv), 20);
  EXPECT_EQ(b.tokens.size(), 21u);  // sampled after its last chunk
}

TEST(Scheduler, AdmitsByPriorityThenArrivalWithinTheSeqCap) {
  Fixture f(64, options(3, 64));
  SchedSequence& low = f.sched.add({0, 0, 0}, tokens(4, 1), 8, 1, {});
  SchedSequence& high_late = f.sched.add({5, 2, 0}, tokens(4, 100), 8, 1, {});
  SchedSequence& high_early = f.sched.add({5, 1, 0}, tokens(4, 200), 8, 2, {});  // n = 2: two slots
  const StepPlan& p = f.sched.schedule();
  // high_early (2 slots) + high_late (1) fill the 3 slots; low waits.
  ASSERT_EQ(p.admitted.size(), 2u);
  EXPECT_EQ(p.admitted[0], &high_early);
  EXPECT_EQ(p.admitted[1], &high_late);
  EXPECT_FALSE(low.running());
  EXPECT_EQ(f.sched.num_running_slots(), 3);
  f.run(p, /*sample=*/false);
  // The fork moves a slot from the prompt sequence to the child: still 3.
  SchedSequence& child = f.sched.fork(high_early, {5, 1, 1});
  EXPECT_EQ(f.sched.num_running_slots(), 3);
  EXPECT_EQ(f.bm.block_table(child.kv), f.bm.block_table(high_early.kv));
  for (SchedSequence* s : {&high_early, &child, &high_late}) s->tokens.push_back(7);  // sampled
  f.sched.remove(high_late.id);
  const StepPlan& p2 = f.sched.schedule();
  ASSERT_EQ(p2.admitted.size(), 1u);
  EXPECT_EQ(p2.admitted[0], &low);
  f.run(p2);
}

TEST(Scheduler, WatermarkHoldsBackAdmissionOnlyWhenOthersRun) {
  Fixture f(8, options(4, 64, /*watermark=*/3));
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(24, 1), 32, 1, {});  // 6 of 8 blocks: alone, fine
  f.run(f.sched.schedule());
  ASSERT_TRUE(a.running());
  SchedSequence& b = f.sched.add({0, 1, 0}, tokens(2, 500), 8, 1, {});
  const StepPlan& p = f.sched.schedule();  // 1 free block after a's decode block... b needs 1, 3 kept
  EXPECT_TRUE(p.admitted.empty());
  EXPECT_FALSE(b.running());
  f.run(p);
  f.sched.remove(a.id);
  const StepPlan& p2 = f.sched.schedule();
  ASSERT_EQ(p2.admitted.size(), 1u);
  EXPECT_EQ(p2.admitted[0], &b);
  f.run(p2);
}

TEST(Scheduler, PreemptsLowestPriorityLatestAndResumesFromTheCache) {
  // 8 blocks of 4 tokens. Three sequences of 6-token prompts decode until the pool runs out.
  Fixture f(8, options(4, 64));
  SchedSequence& first = f.sched.add({0, 0, 0}, tokens(6, 1), 16, 1, {});
  SchedSequence& important = f.sched.add({1, 1, 0}, tokens(6, 100), 16, 1, {});
  SchedSequence& last = f.sched.add({0, 2, 0}, tokens(6, 200), 16, 1, {});
  f.run(f.sched.schedule());
  ASSERT_TRUE(first.running() && important.running() && last.running());  // 2 blocks each
  int64_t steps = 0;
  std::vector<SchedSequence*> victims;
  while (victims.empty() && steps < 10) {
    const StepPlan& p = f.sched.schedule();
    victims = p.preempted;
    f.run(p);
    ++steps;
  }
  // Tokens 6, 7 fit the second block; the 9th token needs a third block each: 9 > 8.
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0], &last);  // priority 0 and arrived last
  EXPECT_FALSE(last.running());
  const size_t kept = last.tokens.size();
  EXPECT_GT(kept, 6u);  // its generated tokens stay with it
  // When the others end, it is re-admitted: its full blocks come from the prefix cache.
  f.sched.remove(first.id);
  f.sched.remove(important.id);
  const StepPlan& p = f.sched.schedule();
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.admitted[0], &last);
  EXPECT_EQ(last.admitted_cached, 8);  // (9 - 1) / 4 full blocks
  EXPECT_EQ(p.scheduled[0].n_tokens, static_cast<int64_t>(kept) - 8);
  EXPECT_EQ(last.num_admissions, 2);
  EXPECT_EQ(p.prefix_hit_tokens, 8);
  f.run(p);
  f.sched.remove(last.id);
  EXPECT_EQ(f.pool.num_in_use(), 0);
}

TEST(Scheduler, ASequenceAloneNeverPreemptsItself) {
  // One sequence filling the whole pool keeps running: a victim is only ever another one.
  Fixture f(4, options(2, 16));
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(10, 1), 16, 1, {});
  SchedSequence& b = f.sched.add({0, 1, 0}, tokens(3, 50), 16, 1, {});
  for (int i = 0; i < 6; ++i) {
    const StepPlan& p = f.sched.schedule();
    ASSERT_FALSE(p.scheduled.empty());
    f.run(p);
  }
  EXPECT_TRUE(a.running());
  EXPECT_EQ(f.bm.length(a.kv), 15);  // 10 + 5 decodes (the 6th step's token is pending)
  EXPECT_FALSE(b.running());         // preempted or never admitted once a grew
  f.sched.remove(a.id);
  f.sched.remove(b.id);
  EXPECT_EQ(f.pool.num_in_use(), 0);
}

}  // namespace
}  // namespace pagoda::engine

namespace pagoda::engine {
namespace {

TEST(Scheduler, SequenceThatCannotFitBesidePinnedBlocksIsRefusedNotLeftWaiting) {
  Fixture f(8, options(4, 64));
  // A computed prefix of 4 blocks, finished (cached), then pinned (as kvcache::CachePins does).
  SchedSequence& first = f.sched.add({0, 0, 0}, tokens(17, 100), 17, 1, {});
  f.run(f.sched.schedule(), /*sample=*/false);
  f.sched.remove(first.id);
  kvcache::PrefixMatch pin = f.bm.pin_prefix(tokens(16, 100), {});
  ASSERT_EQ(pin.num_blocks(), 4);
  EXPECT_EQ(f.bm.num_available_blocks(), 4);
  // 5 blocks of other tokens never fit in the 4 unpinned ones: refused, nothing scheduled.
  SchedSequence& big = f.sched.add({0, 1, 0}, tokens(18, 500), 18, 1, {});
  SchedSequence& small = f.sched.add({0, 2, 0}, tokens(6, 900), 6, 1, {});
  const StepPlan& p = f.sched.schedule();
  ASSERT_EQ(p.refused.size(), 1u);
  EXPECT_EQ(p.refused[0], &big);
  EXPECT_TRUE(p.scheduled.empty());
  EXPECT_FALSE(big.running());
  f.sched.remove(big.id);  // the owner ends it
  // The next step admits what fits; a prompt that shares the pinned prefix uses its blocks.
  SchedSequence& shared = f.sched.add({0, 3, 0}, tokens(19, 100), 19, 1, {});
  const StepPlan& q = f.sched.schedule();
  EXPECT_TRUE(q.refused.empty());
  ASSERT_EQ(q.scheduled.size(), 2u);
  EXPECT_EQ(shared.admitted_cached, 16);
  f.run(q, false);
  EXPECT_TRUE(small.running());
  f.sched.remove(small.id);
  f.sched.remove(shared.id);
  pin.reset();
  f.bm.check_integrity();
}

// The latency budget with an injected cost model (10 ms + 1 ms per token, never fitted: no
// timing): while a sequence decodes, a step takes the tokens that fit 40 ms (30), so the long
// prompt gets 29 a step; alone (nobody decoding) it gets the whole max_num_batched_tokens.
TEST(Scheduler, LatencyBudgetCutsPrefillChunksOnlyWhileSequencesDecode) {
  const StepCostModel cost(10e6, 1e6);
  ASSERT_EQ(cost.tokens_within(40'000'000), 30);
  SchedulerOptions o = options(4, 64);
  o.step_budget_ns = 40'000'000;
  o.step_cost = &cost;
  o.min_prefill_tokens = 8;
  Fixture f(128, o);
  SchedSequence& big = f.sched.add({0, 0, 0}, tokens(100, 10), 120, 1, {});
  const StepPlan& p0 = f.sched.schedule();  // nobody decodes: no cap
  ASSERT_EQ(p0.scheduled.size(), 1u);
  EXPECT_EQ(p0.num_tokens, 64);
  f.run(p0);
  const StepPlan& p1 = f.sched.schedule();
  EXPECT_EQ(p1.num_tokens, 36);  // still prefilling, nobody decodes: the rest at once
  f.run(p1);
  ASSERT_EQ(big.tokens.size(), 101u);  // decoding now
  SchedSequence& b = f.sched.add({0, 1, 0}, tokens(70, 500), 80, 1, {});
  for (int64_t expect : {29, 29, 12}) {  // admission is capped too
    const StepPlan& p = f.sched.schedule();
    ASSERT_EQ(p.scheduled.size(), 2u);
    EXPECT_EQ(p.num_tokens, 1 + expect);
    for (const ScheduledSeq& e : p.scheduled) EXPECT_EQ(e.n_tokens, e.seq == &big ? 1 : expect);
    f.run(p);
  }
  EXPECT_EQ(f.bm.length(b.kv), 70);
}

// A budget the fixed cost alone exceeds still lets prefill progress by min_prefill_tokens a
// step; the cap never exceeds max_num_batched_tokens; budget 0 is off.
TEST(Scheduler, LatencyBudgetKeepsAMinimumChunkAndTheTokenCap) {
  const StepCostModel slow(50e6, 1e6);
  SchedulerOptions o = options(4, 16);
  o.step_budget_ns = 20'000'000;
  o.step_cost = &slow;
  o.min_prefill_tokens = 5;
  Fixture f(128, o);
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(2, 10), 40, 1, {});
  f.run(f.sched.schedule());
  ASSERT_EQ(a.tokens.size(), 3u);
  f.sched.add({0, 1, 0}, tokens(30, 100), 40, 1, {});
  const StepPlan& p = f.sched.schedule();
  EXPECT_EQ(p.num_tokens, 1 + 5);
  f.run(p);

  const StepCostModel fast(0, 1);  // 1 ns a token: 20 M tokens fit, capped at 16
  SchedulerOptions o2 = options(4, 16);
  o2.step_budget_ns = 20'000'000;
  o2.step_cost = &fast;
  Fixture g(128, o2);
  g.sched.add({0, 0, 0}, tokens(2, 10), 40, 1, {});
  g.run(g.sched.schedule());
  g.sched.add({0, 1, 0}, tokens(30, 100), 40, 1, {});
  EXPECT_EQ(g.sched.schedule().num_tokens, 16);

  SchedulerOptions off = options(4, 16);
  off.step_cost = &slow;  // no budget: the model is not asked
  Fixture h(128, off);
  h.sched.add({0, 0, 0}, tokens(2, 10), 40, 1, {});
  h.run(h.sched.schedule());
  h.sched.add({0, 1, 0}, tokens(30, 100), 40, 1, {});
  EXPECT_EQ(h.sched.schedule().num_tokens, 16);
}

// The fit: steps on an exact line recover it; equal sizes keep the prior's slope and move the
// intercept; a fit below the origin falls back to the line through the mean; bad samples are
// ignored.
TEST(StepCostModel, FitsTheMeasuredStepsLinearly) {
  StepCostModel m(5e6, 1e6);
  EXPECT_EQ(m.tokens_within(15'000'000), 10);
  EXPECT_EQ(m.tokens_within(4'000'000), 0);
  for (int i = 0; i < 3; ++i) m.observe(16, 40'000'000);  // one size: slope stays 1 ms
  EXPECT_NEAR(m.per_token_ns(), 1e6, 1);
  EXPECT_NEAR(m.fixed_ns(), 24e6, 1);

  StepCostModel l(5e6, 1e6);
  for (int64_t n : {1, 8, 64, 200, 16, 512}) l.observe(n, 2'000'000 + n * 300'000);  // 2 ms + 0.3 ms/token
  EXPECT_NEAR(l.per_token_ns(), 300'000, 1);
  EXPECT_NEAR(l.fixed_ns(), 2e6, 100);
  for (int i = 0; i < 100; ++i) l.observe(i % 2 == 0 ? 10 : 110, 2'000'000 + (i % 2 == 0 ? 10 : 110) * 600'000);
  EXPECT_NEAR(l.per_token_ns(), 600'000, 100);  // the old line has decayed away
  EXPECT_NEAR(l.fixed_ns(), 2e6, 1e4);
  EXPECT_EQ(l.tokens_within(62'300'000), 100);
  l.observe(0, 1'000'000'000);  // ignored: no tokens
  l.observe(5, -1);             // ignored: negative time
  EXPECT_EQ(l.num_observed(), 106);

  StepCostModel flat(5e6, 1e6);
  flat.observe(10, 1'000'000);
  flat.observe(100, 1'000'000);  // slope 0 clamps to 1 ns, the intercept carries the time
  EXPECT_DOUBLE_EQ(flat.per_token_ns(), 1.0);
  EXPECT_NEAR(flat.fixed_ns(), 1e6, 100);
  StepCostModel neg(5e6, 1e6);
  neg.observe(10, 10'000'000);
  neg.observe(100, 1'000'000'000);  // 11 ms/token, intercept -100 ms: the line through the origin
  EXPECT_DOUBLE_EQ(neg.fixed_ns(), 0.0);
  EXPECT_NEAR(neg.per_token_ns(), (0.9 * 10e6 + 1e9) / (0.9 * 10 + 100), 1);
}

}  // namespace
}  // namespace pagoda::engine

namespace pagoda::engine {
namespace {

// Selecting sequences (SchedSequence::select): chunks capped as the engine's eviction needs,
// never a prefix lookup or registration, and, with the eviction the engine does before each
// append emulated here (SnapKV's selection included), never more than the budget held.
TEST(Scheduler, SelectingSequencesAreChunkedForTheirEvictionAndNeverCached) {
  Fixture f(8, options(4, 10));
  kvcache::KvSelectParams h2o{kvcache::KvSelectMethod::kH2O, 12, 4, 0};  // chunks of (12 - 4) / 2 = 4
  kvcache::KvSelectParams snap{kvcache::KvSelectMethod::kSnapKv, 8, 2, 3};
  ASSERT_TRUE(kvcache::normalize_kv_select(h2o).is_ok() && kvcache::normalize_kv_select(snap).is_ok());
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(20, 1), 40, 1, {}, h2o);
  SchedSequence& b = f.sched.add({0, 1, 0}, tokens(14, 1), 30, 1, {}, snap);
  std::vector<int64_t> victims;
  std::vector<int64_t> snap_chunks;
  for (int step = 0; step < 40; ++step) {
    const StepPlan& plan = f.sched.schedule();
    EXPECT_EQ(plan.prefix_queried_tokens, 0);
    for (const ScheduledSeq& e : plan.scheduled) {
      kvcache::KvSelectState& st = *f.bm.select_state(e.seq->kv);
      if (e.seq == &a) EXPECT_LE(e.n_tokens, 4);
      if (e.seq == &b) {
        snap_chunks.push_back(e.n_tokens);
        if (e.begin < 14) EXPECT_LE(e.begin + e.n_tokens, 14) << "a SnapKV chunk crosses its prompt's end";
        if (!st.evicting && st.next_position >= st.prompt) st.evicting = true;  // the selection
      }
      const int64_t length = f.bm.length(e.seq->kv);
      if (st.evicting && length + e.n_tokens > st.params.budget) {
        kvcache::choose_victims(st.positions, st.scores, length + e.n_tokens - st.params.budget, st.params.recent, victims);
        f.bm.compact(e.seq->kv, victims);
      }
    }
    f.run(plan);
    for (const ScheduledSeq& e : plan.scheduled) {
      const int64_t cap = e.seq == &a ? 12 : std::max<int64_t>(14, 8);
      EXPECT_LE(f.bm.length(e.seq->kv), cap);
      EXPECT_LE(static_cast<int64_t>(f.bm.block_table(e.seq->kv).size()), (cap + kBlock - 1) / kBlock);
    }
  }
  ASSERT_GE(snap_chunks.size(), 3u);
  EXPECT_EQ(snap_chunks[0], 6);  // 10 - a's 4: the prompt's chunks end at 14
  EXPECT_EQ(snap_chunks[1], 6);
  EXPECT_EQ(snap_chunks[2], 2);
  EXPECT_LE(f.bm.length(b.kv), 8) << "after the selection SnapKV holds its budget";
  EXPECT_EQ(f.bm.index().size(), 0) << "selecting sequences register nothing";
  f.sched.remove(a.id);
  f.sched.remove(b.id);
  f.bm.check_integrity();
}

}  // namespace
}  // namespace pagoda::engine
