// The serving engine over a tier stack, on stories260K with f32 KV and a pool too small to keep
// a story's prefix: the prefix is evicted to the host tier (or the SSD tier), promoted back on
// the next request, and the generation equals Engine::generate without any tier, bit for bit.
// Also: the usage breakdown by tier, a corrupt SSD record (a miss, counted, output equal to
// cold), a load forced off by the cost model, and loads driven step by step through a
// FakeTier (the sequence joins the batch only when its blocks are in; aborting it mid-load), and a
// host-tier load, complete at once, joining the batch in the step that admits it.
// Introspection over the tiers: explain names the tier of each hitting block and its hit count
// is what the request then reports as cached_tokens; snapshots have a row per tier; a request's
// blocks show "loading" and where they were loaded from.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "engine/introspection.h"
#include "fake_tier.h"
#include "kvcache/manual_io.h"
#include "kvcache/disk_tier.h"
#include "kvcache/host_tier.h"
#include "serving_test_util.h"

namespace pagoda {
namespace {

using testing::Recorder;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "pagoda-tiers-XXXXXX";
    CHECK(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

engine::CompletionRequest completion(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  engine::CompletionRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

class ServingTiers : public ::testing::Test {
 protected:
  // The id of the one request the engine holds.
  static engine::RequestId rec_id(engine::ServingEngine&, engine::KvIntrospector& kv) {
    const engine::KvSnapshot snap = kv.snapshot({});
    CHECK(snap.requests.size() == 1u);
    return snap.requests[0].id;
  }
  // Explains the story under these tiers (after churn), runs it, and checks that explain's hit
  // tokens per tier are what the request reports, and the dump names where blocks came from.
  void explain_then_run(engine::ServingEngine& se, std::string_view expect_tier);
  void SetUp() override { s_ = testing::load_stories(); }

  // An engine whose pool holds `pool_blocks` blocks, with the given tiers below it.
  std::unique_ptr<engine::ServingEngine> make(int64_t pool_blocks, std::vector<std::unique_ptr<kvcache::Tier>> tiers,
                                              engine::LoadCostModel::Mode mode = engine::LoadCostModel::Mode::kAlwaysLoad,
                                              std::vector<bool> write_through = {}) {
    engine::EngineConfig ec;
    ec.num_threads = 1;
    ec.max_context = s_->reference->max_context();
    ec.kv_cache_bytes = testing::pool_bytes(*s_, pool_blocks);
    auto e = engine::Engine::create(s_->model, ec, s_->clock, s_->logger).value();
    EXPECT_TRUE(e->attach_tiers(std::move(tiers), kvcache::OffloadMode::kWriteBack, mode, write_through).is_ok());
    engine_ = e.get();
    auto se = engine::ServingEngine::create(std::move(e), s_->tokenizer, engine::ServingConfig{});
    EXPECT_TRUE(se.is_ok()) << se.status().message();
    return std::move(se).value();
  }
  std::unique_ptr<kvcache::Tier> host(int64_t blocks) {
    kvcache::HostTierOptions o;
    o.layout = s_->reference->kv_layout();
    o.capacity_bytes = blocks * (kvcache::record_bytes(kvcache::record_meta_for(o.layout)) + 64);
    return kvcache::HostTier::create(o, clock_).value();
  }
  std::unique_ptr<kvcache::Tier> disk(const std::string& dir, int64_t blocks, std::unique_ptr<kvcache::IoBackend> io = nullptr) {
    kvcache::DiskTierOptions o;
    o.dir = dir;
    o.layout = s_->reference->kv_layout();
    o.capacity_bytes = blocks * ((kvcache::record_bytes(kvcache::record_meta_for(o.layout)) + 4095) / 4096 * 4096);
    o.model_fingerprint = s_->reference->model_fingerprint();
    o.kv_format = s_->reference->kv_format_key();
    auto tier = kvcache::DiskTier::create(o, clock_, s_->logger, std::move(io));
    EXPECT_TRUE(tier.is_ok()) << tier.status().message();
    return std::move(tier).value();
  }
  // Runs one request to its end through step().
  std::shared_ptr<Recorder> run(engine::ServingEngine& se, const std::vector<int32_t>& prompt, int64_t max_tokens = 6) {
    auto rec = std::make_shared<Recorder>();
    EXPECT_TRUE(se.submit(completion(prompt, max_tokens), rec).is_ok());
    testing::run_to_end(se);
    se.check_integrity();
    EXPECT_TRUE(rec->finished());
    EXPECT_TRUE(rec->status().is_ok()) << rec->status().message();
    return rec;
  }
  std::vector<int32_t> reference(const std::vector<int32_t>& prompt, int64_t max_tokens = 6) {
    engine::GenerateRequest g;
    g.prompt = prompt;
    g.max_new_tokens = max_tokens;
    return s_->reference->generate(g).value().tokens;
  }
  std::vector<int32_t> story() { return s_->tokenizer->encode(testing::kStoryText, true, false); }
  // Fills the pool with other prompts (7 blocks each of an 8-block pool) so that the story's
  // blocks are evicted, then lets every put down to the tiers complete.
  void churn(engine::ServingEngine& se) {
    for (int k = 0; k < 3; ++k) {
      std::vector<int32_t> t{s_->tokenizer->bos_id()};
      for (int i = 0; i < 100; ++i) t.push_back(3 + (i * 7 + k * 101) % 400);
      run(se, t, 2);
    }
  }
  int64_t cached_from(const Recorder& r, std::string_view tier) {
    for (int i = 0; i < r.usage().num_cached_sources; ++i) {
      if (r.usage().cached_by_tier[static_cast<size_t>(i)].tier == tier) return r.usage().cached_by_tier[static_cast<size_t>(i)].tokens;
    }
    return -1;
  }

  std::unique_ptr<testing::Stories> s_;
  ManualClock clock_;
  engine::Engine* engine_ = nullptr;
};

TEST_F(ServingTiers, PrefixFromTheHostTierEqualsRecomputeBitForBit) {
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(64));
  auto se = make(/*pool=*/8, std::move(tiers));
  const std::vector<int32_t> p = story();
  ASSERT_GT(p.size(), 48u);
  const auto cold = run(*se, p);
  EXPECT_EQ(cold->choice(0).tokens, reference(p));
  churn(*se);
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p));
  const int64_t full_blocks = (static_cast<int64_t>(p.size()) - 1) / 16 * 16;
  EXPECT_EQ(warm->usage().cached_tokens, full_blocks);
  EXPECT_EQ(cached_from(*warm, "pool") + cached_from(*warm, "host"), full_blocks);
  EXPECT_GT(cached_from(*warm, "host"), 0) << "the prefix came back from the host tier";
  const engine::ServingMetrics m = se->metrics();
  ASSERT_EQ(m.tiers.size(), 1u);
  EXPECT_EQ(m.tiers[0].name, "host");
  EXPECT_GT(m.tiers[0].hit_tokens, 0);
  EXPECT_GT(m.tiers[0].offloaded_blocks, 0);
  EXPECT_GT(m.tiers[0].load_latency.count, 0);
  EXPECT_GT(m.tier_load_decisions, 0);
  testing::expect_clean(*se);
}

TEST_F(ServingTiers, AHostTierLoadJoinsTheBatchInTheStepThatAdmitsIt) {
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(64));
  auto se = make(/*pool=*/8, std::move(tiers));
  const std::vector<int32_t> p = story();
  run(*se, p);
  churn(*se);
  auto rec = std::make_shared<Recorder>();
  ASSERT_TRUE(se->submit(completion(p, 6), rec).is_ok());
  se->step();  // admitted, loaded from the host tier during the admission, prefilled, sampled
  ASSERT_EQ(rec->choice(0).tokens.size(), 1u) << "the first token comes from the admitting step";
  EXPECT_GT(engine_->tiers()->counters(0).loaded_blocks, 0);
  testing::run_to_end(*se);
  EXPECT_EQ(rec->choice(0).tokens, reference(p));
  EXPECT_GT(cached_from(*rec, "host"), 0);
  testing::expect_clean(*se);
}

TEST_F(ServingTiers, PrefixFromTheDiskTierEqualsRecomputeBitForBit) {
  TempDir dir;
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(disk(dir.path, 64));
  auto se = make(8, std::move(tiers));
  const std::vector<int32_t> p = story();
  run(*se, p);
  churn(*se);
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p));
  EXPECT_GT(cached_from(*warm, "disk"), 0);
  EXPECT_EQ(se->metrics().tiers.at(0).corrupt_records, 0);
  testing::expect_clean(*se);
}

TEST_F(ServingTiers, HostEvictionDemotesToDiskAndPromotesFromIt) {
  TempDir dir;
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(2));  // too small for the story: most of it goes on to the disk
  tiers.push_back(disk(dir.path, 64));
  auto se = make(8, std::move(tiers));
  const std::vector<int32_t> p = story();
  run(*se, p);
  churn(*se);
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p));
  EXPECT_GT(cached_from(*warm, "disk"), 0);
  const engine::ServingMetrics m = se->metrics();
  EXPECT_GT(m.tiers.at(1).demoted_blocks, 0);
  testing::expect_clean(*se);
}

TEST_F(ServingTiers, CorruptDiskRecordIsAMissCountedAndOutputEqualsCold) {
  TempDir dir;
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(disk(dir.path, 64));
  auto se = make(8, std::move(tiers));
  const std::vector<int32_t> p = story();
  run(*se, p);
  churn(*se);
  // Flip a byte in the middle of every slot's payload: whichever record is read fails.
  const std::string file = kvcache::disk_tier_file_path(dir.path, 0);
  {
    FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    const int64_t slot = (kvcache::record_bytes(kvcache::record_meta_for(s_->reference->kv_layout())) + 4095) / 4096 * 4096;
    for (int64_t s = 0; s < 64; ++s) {
      const long at = static_cast<long>(s * slot + 4096 + 100);
      std::fseek(f, at, SEEK_SET);
      const int c = std::fgetc(f);
      std::fseek(f, at, SEEK_SET);
      std::fputc(c ^ 0x20, f);
    }
    std::fclose(f);
  }
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p)) << "a corrupt record is recomputed, never attended to";
  EXPECT_EQ(cached_from(*warm, "disk"), 0);
  EXPECT_GT(se->metrics().tiers.at(0).corrupt_records, 0);
  EXPECT_GT(se->metrics().tiers.at(0).failed_loads, 0);
  testing::expect_clean(*se);
}

// Run-time disk faults (issue 9, point 9): a read that fails (EIO) while a prefix is promoted,
// and a disk that fills (ENOSPC) while blocks are written down, turn the disk tier off; the
// requests still succeed with the same output, the host tier keeps serving, and the metrics say
// so (enabled false, a fault counted).
TEST_F(ServingTiers, FailingDiskReadTurnsTheDiskTierOffAndRequestsStillSucceed) {
  TempDir dir;
  auto io = std::make_unique<kvcache::ManualIo>();
  kvcache::ManualIo* manual = io.get();
  manual->auto_complete = true;  // every request completes at the next reap
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(disk(dir.path, 64, std::move(io)));
  auto se = make(8, std::move(tiers));
  const std::vector<int32_t> p = story();
  run(*se, p);
  churn(*se);
  manual->inject({kvcache::IoOpcode::kRead, -EIO});
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p)) << "what the disk could not give back is recomputed";
  EXPECT_EQ(cached_from(*warm, "disk"), 0);
  engine::ServingMetrics m = se->metrics();
  EXPECT_FALSE(m.tiers.at(0).enabled);
  EXPECT_EQ(m.tiers.at(0).faults, 1);
  EXPECT_GT(m.tiers.at(0).failed_loads, 0);
  // From now on the disk is never touched again, and requests go on.
  const size_t requests = manual->log.size();
  churn(*se);
  const auto after = run(*se, p);
  EXPECT_EQ(after->choice(0).tokens, reference(p));
  EXPECT_EQ(manual->log.size(), requests);
  testing::expect_clean(*se);
}

TEST_F(ServingTiers, FullDiskTurnsTheDiskTierOffAndTheHostTierServesOn) {
  TempDir dir;
  auto io = std::make_unique<kvcache::ManualIo>();
  kvcache::ManualIo* manual = io.get();
  manual->auto_complete = true;
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(64));
  tiers.push_back(disk(dir.path, 64, std::move(io)));
  manual->inject({kvcache::IoOpcode::kWrite, -ENOSPC});  // after start-up: the first record written fills the disk
  auto se = make(8, std::move(tiers), engine::LoadCostModel::Mode::kAlwaysLoad, {false, true});
  const std::vector<int32_t> p = story();
  const auto cold = run(*se, p);
  EXPECT_EQ(cold->choice(0).tokens, reference(p));
  EXPECT_FALSE(se->metrics().tiers.at(1).enabled);
  churn(*se);
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p));
  EXPECT_GT(cached_from(*warm, "host"), 0) << "the host tier is unaffected";
  EXPECT_EQ(cached_from(*warm, "disk"), 0);
  const engine::ServingMetrics m = se->metrics();
  EXPECT_TRUE(m.tiers.at(0).enabled);
  EXPECT_FALSE(m.tiers.at(1).enabled);
  EXPECT_EQ(m.tiers.at(1).faults, 1);
  testing::expect_clean(*se);
}

TEST_F(ServingTiers, NeverLoadRecomputesAndCountsTheDecision) {
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(64));
  auto se = make(8, std::move(tiers), engine::LoadCostModel::Mode::kNeverLoad);
  const std::vector<int32_t> p = story();
  run(*se, p);
  churn(*se);
  const auto warm = run(*se, p);
  EXPECT_EQ(warm->choice(0).tokens, reference(p));
  EXPECT_EQ(cached_from(*warm, "host"), 0);
  EXPECT_GT(se->metrics().tier_recompute_decisions, 0);
  EXPECT_EQ(se->metrics().tier_load_decisions, 0);
}

TEST_F(ServingTiers, ALoadingSequenceWaitsForItsBlocksAndCanBeAborted) {
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  auto fake = std::make_unique<kvcache::testing::FakeTier>("fake", s_->reference->kv_layout(), 64);
  kvcache::testing::FakeTier* f = fake.get();
  tiers.push_back(std::move(fake));
  auto se = make(8, std::move(tiers));
  // Every lookup and get of the fake tier completes only when the test says so.
  auto run_fake = [&](const std::vector<int32_t>& prompt, int64_t max_tokens) {
    auto rec = std::make_shared<Recorder>();
    EXPECT_TRUE(se->submit(completion(prompt, max_tokens), rec).is_ok());
    for (int i = 0; i < 10000 && !rec->finished(); ++i) {
      f->complete_all();
      se->step();
    }
    EXPECT_TRUE(rec->finished());
    return rec;
  };
  const std::vector<int32_t> p = story();
  run_fake(p, 6);
  for (int k = 0; k < 3; ++k) {  // churn: the story's blocks go down into the fake tier
    std::vector<int32_t> t{s_->tokenizer->bos_id()};
    for (int i = 0; i < 100; ++i) t.push_back(3 + (i * 7 + k * 101) % 400);
    run_fake(t, 2);
  }
  for (int i = 0; i < 3; ++i) {
    f->complete_all();
    se->step();
  }
  // The probe's lookup waits in the fake tier: the request is not admitted yet.
  auto rec = std::make_shared<Recorder>();
  ASSERT_TRUE(se->submit(completion(p, 6), rec).is_ok());
  se->step();
  EXPECT_EQ(se->metrics().running, 0);
  f->complete_all();  // the lookup: admitted, its blocks loading
  se->step();
  EXPECT_EQ(se->metrics().running, 1);
  {
    engine::KvIntrospector& kv = *se->introspector();
    const engine::RequestKv dumped = kv.request_kv(rec_id(*se, kv)).value();
    EXPECT_EQ(dumped.request.state, "loading");
    int64_t loading = 0;
    for (const engine::BlockSnapshot& b : dumped.sequences.at(0).blocks) {
      if (b.state != "loading") continue;
      ++loading;
      EXPECT_EQ(b.loaded_from, "fake");
    }
    EXPECT_GT(loading, 0);
    const engine::KvSnapshot snap = kv.snapshot({});
    EXPECT_EQ(snap.blocks_loading, loading);
    EXPECT_EQ(std::count(snap.block_map.begin(), snap.block_map.end(), engine::kBlockLoading), loading);
    EXPECT_EQ(snap.tier_loads_in_flight, 1);
    EXPECT_EQ(snap.requests.at(0).state, "loading");
  }
  for (int i = 0; i < 3; ++i) {
    se->step();
    se->check_integrity();
  }
  EXPECT_TRUE(rec->choice(0).tokens.empty()) << "no token before its blocks are in";
  for (int i = 0; i < 10000 && !rec->finished(); ++i) {
    f->complete_all();  // the gets
    se->step();
  }
  ASSERT_TRUE(rec->finished());
  EXPECT_EQ(rec->choice(0).tokens, reference(p));
  EXPECT_GT(cached_from(*rec, "fake"), 0);
  // Aborted mid-load: the blocks are freed once the get has completed, never before.
  for (int k = 3; k < 6; ++k) {
    std::vector<int32_t> t{s_->tokenizer->bos_id()};
    for (int i = 0; i < 100; ++i) t.push_back(3 + (i * 7 + k * 101) % 400);
    run_fake(t, 2);
  }
  auto aborted = std::make_shared<Recorder>();
  const engine::RequestId id = se->submit(completion(p, 6), aborted).value();
  se->step();
  f->complete_all();
  se->step();  // loading now
  EXPECT_EQ(se->metrics().running, 1);
  se->abort(id);
  se->step();
  EXPECT_TRUE(aborted->finished());
  se->check_integrity();
  EXPECT_GT(se->metrics().kv_blocks_in_use, 0) << "still held for the get in flight";
  f->complete_all();
  se->step();
  testing::expect_clean(*se);
}

void ServingTiers::explain_then_run(engine::ServingEngine& se, std::string_view expect_tier) {
  engine::KvIntrospector& kv = *se.introspector();
  const std::vector<int32_t> p = story();
  run(se, p);
  churn(se);
  engine::ExplainRequest ask;
  ask.prompt = p;
  const engine::KvExplanation e = kv.explain(ask).value();
  const int64_t B = e.block_size;
  EXPECT_EQ(e.cause, engine::ExplainCause::kFullHit) << e.detail;
  EXPECT_EQ(e.hit_tokens, e.cacheable_tokens);
  int64_t from_expected = -1;
  for (const engine::TierHit& t : e.tiers) {
    if (t.tier == expect_tier) from_expected = t.tokens;
  }
  EXPECT_GT(from_expected, 0) << "explain names the " << expect_tier << " tier: " << e.detail;
  EXPECT_NE(e.detail.find(std::string(expect_tier)), std::string::npos) << e.detail;
  for (const engine::ExplainBlock& b : e.blocks) EXPECT_NE(b.where, "miss");
  // The request: admitted, its blocks load, then it computes; the dump says where they came from.
  auto rec = std::make_shared<Recorder>();
  const engine::RequestId id = se.submit(completion(p, 24), rec).value();
  int64_t loaded_blocks = -1;
  for (int i = 0; i < 10000 && !rec->finished(); ++i) {
    se.step();
    auto dumped = kv.request_kv(id);
    if (!dumped.is_ok() || dumped->request.state == "loading" || dumped->request.state == "waiting") continue;
    loaded_blocks = 0;
    for (const engine::BlockSnapshot& b : dumped->sequences.at(0).blocks) {
      if (b.loaded_from.empty()) continue;
      ++loaded_blocks;
      EXPECT_FALSE(b.copies.empty()) << "tiers are inclusive: a loaded block keeps a copy below";
    }
    break;
  }
  testing::run_to_end(se);
  ASSERT_TRUE(rec->finished());
  EXPECT_EQ(rec->choice(0).tokens, reference(p, 24));
  EXPECT_EQ(rec->usage().cached_tokens, e.hit_tokens) << "explain's count is what admission then found";
  int64_t loaded_tokens = 0;
  for (const engine::TierHit& t : e.tiers) {
    EXPECT_EQ(cached_from(*rec, t.tier), t.tokens) << t.tier;
    if (t.tier != "pool") loaded_tokens += t.tokens;
  }
  EXPECT_EQ(loaded_blocks * B, loaded_tokens);
  // Snapshot rows: the pool, then each tier, with the tier's own numbers.
  const engine::KvSnapshot snap = kv.snapshot({});
  const engine::ServingMetrics m = se.metrics();
  ASSERT_EQ(snap.tiers.size(), 1 + m.tiers.size());
  EXPECT_EQ(snap.tiers[0].tier, "pool");
  for (size_t t = 0; t < m.tiers.size(); ++t) {
    const engine::TierSnapshot& row = snap.tiers[t + 1];
    EXPECT_EQ(row.tier, m.tiers[t].name);
    EXPECT_EQ(row.capacity_blocks, m.tiers[t].capacity_blocks);
    EXPECT_EQ(row.used_blocks, m.tiers[t].used_blocks);
    EXPECT_EQ(row.hit_blocks * B, m.tiers[t].hit_tokens);
    EXPECT_EQ(row.bytes_read, m.tiers[t].bytes_read);
    EXPECT_EQ(row.bytes_written, m.tiers[t].bytes_written);
    EXPECT_EQ(row.corrupt_records, 0);
  }
  EXPECT_GT(snap.tier_load_decisions, 0);
  EXPECT_EQ(snap.tier_load_decisions, m.tier_load_decisions);
  testing::expect_clean(se);
}

TEST_F(ServingTiers, ExplainNamesTheHostTierAndItsCountIsTheRequestsCachedTokens) {
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(64));
  auto se = make(8, std::move(tiers));
  explain_then_run(*se, "host");
}

TEST_F(ServingTiers, ExplainNamesTheDiskTierForBlocksDemotedFromTheHost) {
  TempDir dir;
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  tiers.push_back(host(2));  // too small: the story's blocks are demoted on to the disk
  tiers.push_back(disk(dir.path, 64));
  auto se = make(8, std::move(tiers));
  explain_then_run(*se, "disk");
  EXPECT_GT(se->metrics().tiers.at(1).demoted_blocks, 0);
}

}  // namespace
}  // namespace pagoda
