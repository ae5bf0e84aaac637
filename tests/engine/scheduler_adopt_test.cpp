// Adopted KV (Scheduler::add with adopt, P/D disaggregation's decode side): a sequence admitted
// onto a block-manager sequence built outside feeds only the rest of its prompt; one that cannot
// fit waits holding it, or drops it when even alone it never could; removal frees it.
#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "scheduler_fixture.h"

namespace pagoda::engine {
namespace {

using namespace scheduler_testing;

// A sequence of f's manager holding the committed KV of prompt[0, n): what an import builds.
kvcache::SeqId built(Fixture& f, const std::vector<int32_t>& prompt, int64_t n, int64_t table_tokens) {
  const kvcache::SeqId kv = f.bm.add_sequence(table_tokens, {});
  f.slots.resize(static_cast<size_t>(n));
  f.copies.clear();
  EXPECT_TRUE(f.bm.append(kv, std::span(prompt).first(static_cast<size_t>(n)), f.slots, f.copies));
  f.bm.commit(kv);
  return kv;
}

TEST(SchedulerAdopt, AdmittedOntoBuiltKvItFeedsOnlyTheLastPromptToken) {
  Fixture f(16, options(4, 64));
  const std::vector<int32_t> prompt = tokens(11, 10);
  const kvcache::SeqId kv = built(f, prompt, 10, 16);  // two full blocks and 2 of 4 in the third
  SchedSequence& s = f.sched.add({0, 0, 0}, prompt, 16, 1, {}, {}, kv);
  const StepPlan& p = f.sched.schedule();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].begin, 10);
  EXPECT_EQ(p.scheduled[0].n_tokens, 1);
  EXPECT_EQ(s.kv, kv);
  EXPECT_EQ(s.admitted_cached, 10);
  EXPECT_EQ(p.prefix_hit_tokens, 10);
  EXPECT_EQ(f.bm.num_sequences(), 1);
  f.run(p);
  EXPECT_EQ(f.bm.length(kv), 11);
  EXPECT_EQ(f.pool.num_in_use(), 3);  // the tail block was written in place, never copied
  f.sched.remove(s.id);
  EXPECT_EQ(f.pool.num_in_use(), 0);
  EXPECT_EQ(f.pool.num_cached(), 2);  // the full blocks stay cached
  f.bm.check_integrity();
}

TEST(SchedulerAdopt, RemovedWhileWaitingFreesItsKv) {
  Fixture f(16, options(1, 64));
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(5, 500), 8, 1, {});
  f.run(f.sched.schedule());  // a holds the only sequence slot
  const std::vector<int32_t> prompt = tokens(9, 10);
  const kvcache::SeqId kv = built(f, prompt, 8, 12);
  SchedSequence& b = f.sched.add({0, 1, 0}, prompt, 12, 1, {}, {}, kv);
  const StepPlan& p = f.sched.schedule();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].seq, &a);
  EXPECT_FALSE(b.running());
  f.sched.remove(b.id);
  EXPECT_FALSE(f.bm.has_sequence(kv));
  f.sched.remove(a.id);
  EXPECT_EQ(f.pool.num_in_use(), 0);
  f.bm.check_integrity();
}

TEST(SchedulerAdopt, WaitsHoldingItsKvWhileOthersRunThenAdmitsOntoIt) {
  Fixture f(8, options(4, 64));
  SchedSequence& a = f.sched.add({0, 0, 0}, tokens(24, 500), 32, 1, {});
  f.run(f.sched.schedule());  // 6 blocks
  const std::vector<int32_t> prompt = tokens(12, 10);
  const kvcache::SeqId kv = built(f, prompt, 3, 12);  // 1 block; the rest needs 2, 1 is free
  SchedSequence& b = f.sched.add({0, 1, 0}, prompt, 12, 1, {}, {}, kv);
  const StepPlan& p1 = f.sched.schedule();
  ASSERT_EQ(p1.scheduled.size(), 1u);  // a decodes
  EXPECT_EQ(p1.scheduled[0].seq, &a);
  EXPECT_TRUE(p1.admitted.empty());
  EXPECT_TRUE(p1.refused.empty());
  EXPECT_EQ(b.adopt, kv);  // still holding it
  f.run(p1);
  f.sched.remove(a.id);
  const StepPlan& p2 = f.sched.schedule();
  ASSERT_EQ(p2.scheduled.size(), 1u);
  EXPECT_EQ(p2.scheduled[0].begin, 3);
  EXPECT_EQ(b.kv, kv);
  f.run(p2);
  f.sched.remove(b.id);
  EXPECT_EQ(f.pool.num_in_use(), 0);
  f.bm.check_integrity();
}

TEST(SchedulerAdopt, KvThatCannotFitEvenAloneIsDroppedForTheOrdinaryWay) {
  Fixture f(4, options(4, 64));
  const std::vector<int32_t> prompt = tokens(20, 10);  // 5 blocks: more than the pool
  const kvcache::SeqId kv = built(f, prompt, 3, 20);
  SchedSequence& s = f.sched.add({0, 0, 0}, prompt, 20, 1, {}, {}, kv);
  const StepPlan& p = f.sched.schedule();
  EXPECT_FALSE(f.bm.has_sequence(kv));
  EXPECT_EQ(s.adopt, -1);
  ASSERT_EQ(p.refused.size(), 1u);  // the ordinary way cannot fit it either
  f.sched.remove(s.id);
  EXPECT_EQ(f.pool.num_in_use(), 0);
  f.bm.check_integrity();
}

TEST(SchedulerAdopt, WindowedSequencesDropAdoptedKvAndComputeTheirPrompt) {
  SchedulerOptions o = options(4, 64);
  o.windows.on = true;
  Fixture f(16, o);
  const std::vector<int32_t> prompt = tokens(9, 10);
  const kvcache::SeqId kv = built(f, prompt, 8, 12);
  SchedSequence& s = f.sched.add({0, 0, 0}, prompt, 12, 1, {}, {}, kv);
  const StepPlan& p = f.sched.schedule();
  EXPECT_FALSE(f.bm.has_sequence(kv));
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].begin, 0);
  EXPECT_EQ(p.scheduled[0].n_tokens, 9);
  f.run(p);
  f.sched.remove(s.id);
  f.bm.check_integrity();
}

TEST(SchedulerAdopt, ReleasedKvKeepsEveryBlockForItsNewOwner) {
  Fixture f(16, options(4, 64));
  SchedSequence& s = f.sched.add({0, 0, 0}, tokens(10, 10), 10, 1, {});
  f.run(f.sched.schedule(), false);
  const kvcache::SeqId kv = f.sched.release_kv(s.id);
  EXPECT_TRUE(f.sched.empty());
  EXPECT_EQ(f.bm.length(kv), 10);
  EXPECT_EQ(f.pool.num_in_use(), 3);  // the partly filled third block too
  f.bm.free_sequence(kv);
  EXPECT_EQ(f.pool.num_in_use(), 0);
  f.bm.check_integrity();
}

}  // namespace
}  // namespace pagoda::engine
