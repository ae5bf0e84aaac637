// LoadCostModel (engine/load_cost.h): the first decision of a new instance on its own numbers.
// The case reported on a slow 2-core host: 69 blocks of ~1.17 MB (1,104 tokens of a 110M model,
// f32 KV) in a loopback Redis, prefill at ~175 tokens/s: loading (well under a second) beats
// recomputing (6 s). And Engine::calibrate_load_cost, which times a prefill at start-up.
#include "engine/load_cost.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "kvcache/host_tier.h"
#include "model/model_factory.h"

namespace pagoda::engine {
namespace {

constexpr int64_t kBlockBytes = 1'179'648;  // 16 tokens x 12 layers x 2 x 768 x 4 bytes
constexpr int64_t kBlockSize = 16;
const std::vector<std::string_view> kMedia = {"REDIS"};
const std::vector<kvcache::TierRun> kRuns = {{0, 0, 69}};

// Nothing measured yet: the priors lean toward loading, whatever the prefill speed.
TEST(LoadCostModel, PriorsLoadAPrefixFromAnyTier) {
  LoadCostModel m;
  EXPECT_EQ(m.decide(kRuns, kMedia, kBlockBytes, kBlockSize), 69);
  const std::vector<std::string_view> disk = {"DISK"}, host = {"CPU"};
  EXPECT_EQ(m.decide(kRuns, disk, kBlockBytes, kBlockSize), 69);
  EXPECT_EQ(m.decide(kRuns, host, kBlockBytes, kBlockSize), 69);
  EXPECT_EQ(m.stats().load, 3);
  EXPECT_EQ(m.stats().recompute, 0);
}

// The reported host: a start-up probe of 2.4 MB at ~1 GB/s and a measured prefill of 175
// tokens/s: load (about 0.1 s) rather than recompute (6.3 s).
TEST(LoadCostModel, SlowPrefillAndAProbedRemoteLoad) {
  LoadCostModel m;
  m.observe_load(0, "REDIS", 2 * kBlockBytes, 2'400'000);  // 2.36 MB in 2.4 ms
  m.observe_prefill(32, 182'857'142);                       // 175 tokens/s
  EXPECT_NEAR(m.prefill_tokens_per_s(), 175, 1);
  EXPECT_EQ(m.decide(kRuns, kMedia, kBlockBytes, kBlockSize), 69);
}

// A remote tier probed slow (10 MB/s) and a fast prefill: recompute. The probe is a
// measurement, floored only at 1/8 of the medium's prior (125 MB/s), which still loses here.
TEST(LoadCostModel, ASlowRemoteAgainstAFastPrefillRecomputes) {
  LoadCostModel m;
  m.observe_load(0, "REDIS", kBlockBytes, 117'964'800);  // 10 MB/s
  m.observe_prefill(512, 51'200'000);                      // 10,000 tokens/s
  EXPECT_DOUBLE_EQ(m.bandwidth(0, "REDIS"), 1e9 / 8);
  EXPECT_EQ(m.decide(kRuns, kMedia, kBlockBytes, kBlockSize), 0);
  EXPECT_EQ(m.stats().recompute, 1);
}

// -v: each decision is one debug line with its estimates and whether they were measured.
TEST(LoadCostModel, DecisionsAreLoggedAtDebugLevel) {
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    Logger logger(LogLevel::kDebug, file);
    LoadCostModel m;
    m.set_logger(&logger);
    m.observe_prefill(32, 182'857'142);
    (void)m.decide(kRuns, kMedia, kBlockBytes, kBlockSize);
    Logger quiet(LogLevel::kInfo, file);
    m.set_logger(&quiet);
    (void)m.decide(kRuns, kMedia, kBlockBytes, kBlockSize);  // not logged
  }
  std::fflush(file);
  std::rewind(file);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), file));
  std::fclose(file);
  EXPECT_NE(text.find("69 blocks in tiers: 69 from tier 0 (REDIS 1000 MB/s prior)"), std::string::npos) << text;
  EXPECT_NE(text.find("at 175 tokens/s measured; loads 69 blocks"), std::string::npos) << text;
  EXPECT_EQ(text.find("kv load decision", text.find("kv load decision") + 1), std::string::npos) << text;
}

// A clock that moves 1 ms each time it is read.
class TickingClock final : public Clock {
 public:
  int64_t now_ns() const override { return now_ += 1'000'000; }

 private:
  mutable int64_t now_ = 0;
};

// calibrate_load_cost times a prefill of kCalibrationTokens on a sequence that is never cached:
// the model's prefill speed is what the clock says, the pool holds nothing afterwards, and with
// a clock that does not move (ManualClock) nothing is measured.
TEST(LoadCostModel, CalibrationTimesAPrefillAndCachesNothing) {
  for (bool ticking : {true, false}) {
    TickingClock ticks;
    ManualClock still;
    const Clock& clock = ticking ? static_cast<const Clock&>(ticks) : still;
    Logger logger(LogLevel::kSilent);
    auto model = model::LlamaModel::load(model::make_random_model({"t", 64, 2, 4, 2, 96, 300, 128}, DType::kF32, 5).value());
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    EngineConfig config;
    config.num_threads = 1;
    config.block_size = 4;
    auto engine = Engine::create(std::move(model).value(), config, clock, logger);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    EXPECT_FALSE(engine.value()->calibrate_load_cost().is_ok()) << "no tiers yet";
    kvcache::HostTierOptions host;
    host.layout = engine.value()->kv_layout();
    host.capacity_bytes = int64_t{1} << 20;
    std::vector<std::unique_ptr<kvcache::Tier>> tiers;
    tiers.push_back(kvcache::HostTier::create(host, clock).value());
    ASSERT_TRUE(engine.value()->attach_tiers(std::move(tiers), kvcache::OffloadMode::kWriteThrough).is_ok());
    const Result<double> tps = engine.value()->calibrate_load_cost();
    ASSERT_TRUE(tps.is_ok()) << tps.status().message();
    if (ticking) {
      EXPECT_GT(*tps, 0);
      EXPECT_DOUBLE_EQ(engine.value()->load_cost()->prefill_tokens_per_s(), *tps);
    } else {
      EXPECT_EQ(*tps, 0);
      EXPECT_DOUBLE_EQ(engine.value()->load_cost()->prefill_tokens_per_s(), 500);
    }
    EXPECT_EQ(engine.value()->block_manager().pool().num_cached(), 0);
    EXPECT_EQ(engine.value()->block_manager().pool().num_in_use(), 0);
    EXPECT_EQ(engine.value()->tiers()->counters(0).offloaded_blocks, 0) << "nothing written through";
  }
}

}  // namespace
}  // namespace pagoda::engine
