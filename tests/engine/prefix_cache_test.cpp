// The engine over the prefix cache: reused KV gives the same generations as recomputed KV,
// salts isolate tenants, forks equal independent runs, and a small pool keeps working by
// evicting cached blocks, never blocks in use.
#include <gtest/gtest.h>

#include <set>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/text/gguf_vocab.h"
#include "test_data.h"

namespace pagoda {
namespace {

struct Setup {
  ManualClock clock;
  Logger logger{LogLevel::kSilent};
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

std::unique_ptr<Setup> load(engine::EngineConfig config) {
  auto s = std::make_unique<Setup>();
  auto file = model::GgufFile::read(testing::stories_dir() + "/stories260K.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  auto vocab = model::vocab_from_gguf(*file);
  s->tokenizer = std::make_unique<model::Tokenizer>(model::Tokenizer::create(std::move(vocab).value()).value());
  auto model = model::LlamaModel::load(std::move(file).value());
  config.num_threads = 2;
  config.max_context = 512;
  auto eng = engine::Engine::create(std::move(model).value(), config, s->clock, s->logger);
  EXPECT_TRUE(eng.is_ok()) << eng.status().message();
  s->engine = std::move(eng).value();
  return s;
}

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball.";

engine::GenerateRequest request(const model::Tokenizer& tok, const std::string& text, int64_t n) {
  engine::GenerateRequest r;
  r.prompt = tok.encode(text, true, false);
  r.max_new_tokens = n;
  return r;
}

TEST(EnginePrefixCache, ReusedKvEqualsRecomputedBitForBit) {
  // One row per forward pass: every token takes the same kernels whether or not its prefix
  // came from the cache, so f32 KV must give identical logits and tokens.
  for (int64_t batch : {1, 512}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    engine::EngineConfig on, off;
    on.max_batch_tokens = off.max_batch_tokens = batch;
    off.enable_prefix_caching = false;
    auto cached = load(on);
    auto plain = load(off);
    const engine::GenerateRequest first = request(*cached->tokenizer, kStory, 8);
    auto warm = cached->engine->generate(first);
    ASSERT_TRUE(warm.is_ok());
    EXPECT_EQ(warm->stats.cached_tokens, 0);
    // A longer prompt sharing the first one's prefix.
    engine::GenerateRequest second = request(*cached->tokenizer, std::string(kStory) + " She wanted to play with it", 64);
    auto with_cache = cached->engine->generate(second);
    auto without = plain->engine->generate(second);
    ASSERT_TRUE(with_cache.is_ok() && without.is_ok());
    // At least the first prompt's full blocks; more when its generated tokens match the new
    // prompt's text (greedy stories260K continues this story with " She wanted to play").
    EXPECT_GE(with_cache->stats.cached_tokens, (static_cast<int64_t>(first.prompt.size()) / 16) * 16);
    EXPECT_EQ(with_cache->stats.cached_tokens % 16, 0);
    EXPECT_EQ(without->stats.cached_tokens, 0);
    EXPECT_EQ(with_cache->tokens, without->tokens);
    if (batch == 1) {
      auto a = cached->engine->score(second.prompt);
      auto b = plain->engine->score(second.prompt);
      ASSERT_TRUE(a.is_ok() && b.is_ok());
      EXPECT_EQ(*a, *b);
    }
    cached->engine->block_manager().check_integrity();
    EXPECT_EQ(cached->engine->block_manager().pool().num_in_use(), 0);
    EXPECT_GT(cached->engine->block_manager().pool().num_cached(), 0);
  }
}

TEST(EnginePrefixCache, ExactRepeatReusesAllButTheLastTokenAndSaltsIsolate) {
  auto s = load({});
  engine::GenerateRequest r = request(*s->tokenizer, kStory, 4);
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  ASSERT_TRUE(s->engine->generate(r).is_ok());
  auto again = s->engine->generate(r);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->stats.cached_tokens, ((n - 1) / 16) * 16);  // the last token is always computed
  r.cache_salt = "tenant-b";
  auto other = s->engine->generate(r);
  ASSERT_TRUE(other.is_ok());
  EXPECT_EQ(other->stats.cached_tokens, 0);
  EXPECT_EQ(other->tokens, again->tokens);
  const auto& stats = s->engine->block_manager().stats();
  EXPECT_EQ(stats.num_lookups, 3);
  EXPECT_GT(stats.num_hit_tokens, 0);
}

TEST(EnginePrefixCache, ForkedSamplesEqualIndependentRuns) {
  auto s = load({});
  engine::GenerateRequest r = request(*s->tokenizer, kStory, 48);
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = 77;
  auto parallel = s->engine->generate_parallel(r, 4);
  ASSERT_TRUE(parallel.is_ok()) << parallel.status().message();
  ASSERT_EQ(parallel->samples.size(), 4u);
  EXPECT_LT(parallel->kv_blocks_shared, parallel->kv_blocks_independent);
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    engine::GenerateRequest alone = r;
    alone.sampling.seed = r.sampling.seed + i;
    auto single = s->engine->generate(alone);
    ASSERT_TRUE(single.is_ok());
    EXPECT_EQ(parallel->samples[i].tokens, single->tokens) << "sample " << i;
    distinct.insert(single->tokens);
  }
  EXPECT_GT(distinct.size(), 1u);  // the samples really differ
  s->engine->block_manager().check_integrity();
}

TEST(EnginePrefixCache, SmallPoolEvictsCachedBlocksOnly) {
  engine::EngineConfig config;
  config.kv_cache_bytes = 24 * 16 * 1280;  // 24 blocks of stories260K f32 KV
  for (auto policy : {kvcache::EvictionPolicyKind::kLru, kvcache::EvictionPolicyKind::kLfu,
                      kvcache::EvictionPolicyKind::kPriority}) {
    config.eviction = policy;
    auto s = load(config);
    const std::vector<std::string> openings = {"Tom and Lily", "Once upon a time", "The big dog", "A little bird",
                                               "Sue had a red hat", "One day, Ben"};
    for (int round = 0; round < 3; ++round) {
      for (const std::string& o : openings) {
        engine::GenerateRequest r = request(*s->tokenizer, o + " went to the park to play with a ball.", 100);
        r.priority = static_cast<int32_t>(o.size() % 3);
        auto res = s->engine->generate(r);
        ASSERT_TRUE(res.is_ok()) << res.status().message();
        s->engine->block_manager().check_integrity();
      }
    }
    EXPECT_GT(s->engine->block_manager().stats().num_evictions, 0);
    EXPECT_EQ(s->engine->block_manager().pool().num_in_use(), 0);
  }
}

TEST(EngineKvDump, DescribesTheSequenceBlocks) {
  auto s = load({});
  engine::GenerateRequest r = request(*s->tokenizer, kStory, 10);
  r.dump_kv = true;
  auto res = s->engine->generate(r);
  ASSERT_TRUE(res.is_ok());
  ASSERT_TRUE(res->kv_dump.has_value());
  const engine::SequenceDump& d = *res->kv_dump;
  EXPECT_EQ(d.length, static_cast<int64_t>(r.prompt.size()) + 9);
  ASSERT_EQ(static_cast<int64_t>(d.blocks.size()), (d.length + 15) / 16);
  EXPECT_NE(d.blocks[0].hash, 0u);            // full, committed block: registered
  EXPECT_EQ(d.blocks.back().hash, 0u);        // partial last block: not registered
  EXPECT_EQ(d.blocks[0].state, "in use");
  EXPECT_EQ(d.blocks[0].ref_count, 1);
  ASSERT_EQ(d.blocks[0].k_head0.size(), 4u);
  EXPECT_NE(d.blocks[0].k_head0[0], 0.0f);
  const std::string text = engine::format_kv_dump(d);
  EXPECT_NE(text.find("ref 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace pagoda
