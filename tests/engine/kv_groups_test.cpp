// Forward passes over a KV cache of layer groups (engine/kv_groups.h) give the logits the
// engine's one-geometry cache gives (every layer keeping every block), bit for bit: gemma3
// (sliding and global layers: the sliding group frees its out-of-window blocks and still
// prefix-caches), llama (one full group) and deepseek2 (one latent group); with prefix hits
// whose sliding tables start with holes, and with forks that copy a shared partial block.
#include "engine/kv_groups.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model_factory.h"

namespace pagoda::engine {
namespace {

constexpr int64_t kBlock = 4;

std::vector<int32_t> test_tokens(int64_t n_vocab, int n, int salt) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 37 + 5 + salt * 11) % static_cast<int32_t>(n_vocab));
  return tokens;
}

model::GgufFile random_file(const char* shape_name) {
  model::ModelShape shape = model::find_model_shape(shape_name).value();
  auto file = model::make_random_model(shape, DType::kF32, 7);
  CHECK(file.is_ok());
  return std::move(file).value();
}

// The engine's logits for every row of `tokens`, scored in chunks of `chunk`.
std::vector<float> engine_logits(const char* shape_name, std::span<const int32_t> tokens, int64_t chunk) {
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  auto model = model::LlamaModel::load(random_file(shape_name));
  CHECK(model.is_ok());
  EngineConfig config;
  config.num_threads = 1;
  config.max_batch_tokens = chunk;
  config.block_size = kBlock;
  config.kv_dtype = kernels::KvDType::kF16;
  config.isa = kernels::Isa::kScalar;
  auto engine = Engine::create(std::move(model).value(), config, clock, logger);
  CHECK(engine.is_ok()) << engine.status().message();
  auto logits = engine.value()->score(tokens);
  CHECK(logits.is_ok());
  return std::move(logits).value();
}

struct Grouped {
  std::unique_ptr<model::LlamaModel> model;
  ThreadPool pool{1};
  std::unique_ptr<GroupedKv> runner;
  kvcache::KvNamespace ns{1, 2, 3};

  Grouped(const char* shape_name, int64_t num_pages, int64_t max_tokens) {
    auto m = model::LlamaModel::load(random_file(shape_name));
    CHECK(m.is_ok());
    model = std::move(m).value();
    auto spec = kv_cache_spec_of(model->config(), kBlock, kernels::KvDType::kF16);
    CHECK(spec.is_ok()) << spec.status().message();
    auto r = GroupedKv::create(*model, pool, *spec, num_pages, max_tokens, 4, 256, kernels::Isa::kScalar);
    CHECK(r.is_ok()) << r.status().message();
    runner = std::move(r).value();
  }
  int64_t vocab() const { return model->config().n_vocab; }

  // Scores tokens[from..] of seq in chunks, appending each row's logits to out.
  void score(kvcache::KvSeqId seq, std::span<const int32_t> tokens, int64_t chunk, std::vector<float>& out) {
    for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
      const auto part = tokens.subspan(begin, std::min<size_t>(static_cast<size_t>(chunk), tokens.size() - begin));
      std::vector<float> logits(part.size() * static_cast<size_t>(vocab()));
      const GroupedKv::StepSeq s{seq, part};
      ASSERT_TRUE(runner->step(std::span<const GroupedKv::StepSeq>(&s, 1), true, logits.data()).is_ok());
      out.insert(out.end(), logits.begin(), logits.end());
    }
  }
};

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, int64_t from_row, int64_t vocab) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = static_cast<size_t>(from_row * vocab); i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "row " << i / vocab << ": " << a[i] << " vs " << b[i];
  }
}

TEST(KvGroups, SpecOfAModelFollowsItsLayers) {
  auto gemma = model::LlamaModel::load(random_file("tiny-gemma3"));
  ASSERT_TRUE(gemma.is_ok());
  auto spec = kv_cache_spec_of((*gemma)->config(), kBlock, kernels::KvDType::kF16);
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->describe(), "2 groups: sliding 8 x3 (2 kv heads x 32, f16), full x1 (2 kv heads x 32, f16)");
  auto mla = model::LlamaModel::load(random_file("tiny-mla"));
  ASSERT_TRUE(mla.is_ok());
  auto latent = kv_cache_spec_of((*mla)->config(), kBlock, kernels::KvDType::kF16);
  ASSERT_TRUE(latent.is_ok());
  ASSERT_EQ(latent->groups.size(), 1u);
  EXPECT_EQ(latent->groups[0].layer.kind, kvcache::KvGroupKind::kLatent);
}

TEST(KvGroups, EveryFamilyScoresAsTheOneGeometryCacheDoes) {
  for (const char* shape : {"tiny-gemma3", "tiny", "tiny-mla"}) {
    for (int64_t chunk : {1, 5, 16}) {
      SCOPED_TRACE(std::string(shape) + " chunk " + std::to_string(chunk));
      Grouped g(shape, 256, 16);
      const std::vector<int32_t> tokens = test_tokens(g.vocab(), 30, 0);
      const kvcache::KvSeqId seq = g.runner->kv().add_sequence(64, g.ns);
      std::vector<float> got;
      g.score(seq, tokens, chunk, got);
      expect_same_bits(got, engine_logits(shape, tokens, chunk), 0, g.vocab());
      g.runner->kv().check_integrity();
    }
  }
}

// Chunks of one block throughout, so every row is computed in the same chunk as the engine's
// (a chunk's row count picks the matmul path, and the bits with it).
TEST(KvGroups, Gemma3PrefixHitsThroughSlidingHolesGiveTheSameLogits) {
  Grouped g("tiny-gemma3", 256, 16);
  kvcache::KvCoordinator& kv = g.runner->kv();
  const std::vector<int32_t> first = test_tokens(g.vocab(), 30, 0);
  const kvcache::KvSeqId a = kv.add_sequence(64, g.ns);
  std::vector<float> ignored;
  g.score(a, first, kBlock, ignored);
  // Window 8, block 4: after 30 tokens the sliding group holds blocks 5..7 only.
  EXPECT_EQ(kv.num_held_blocks(a, 0), 3);
  EXPECT_EQ(kv.num_held_blocks(a, 1), 8);
  kv.free_sequence(a);
  // A longer prompt sharing the first 30 tokens: 28 of them (7 blocks) hit.
  std::vector<int32_t> second = first;
  for (int32_t t : test_tokens(g.vocab(), 9, 3)) second.push_back(t);
  kvcache::KvGroupMatch hit = kv.match_prefix(second, g.ns);
  ASSERT_EQ(hit.num_tokens(), 28);
  EXPECT_EQ(hit.blocks(0)[4], -1);  // the window before 28 is [21, 28): blocks 5 and 6
  EXPECT_GE(hit.blocks(0)[5], 0);
  const kvcache::KvSeqId b = kv.add_sequence(64, g.ns);
  kv.adopt(b, std::move(hit));
  std::vector<float> got(28 * static_cast<size_t>(g.vocab()), 0.0f);
  g.score(b, std::span<const int32_t>(second).subspan(28), kBlock, got);
  expect_same_bits(got, engine_logits("tiny-gemma3", second, kBlock), 28, g.vocab());
  // A fork decodes on its own copy of the shared partial block (positions 36..38); each
  // matches a fresh sequence scored the same way.
  const kvcache::KvSeqId c = kv.fork(b);
  std::vector<float> from_b, from_c;
  const std::vector<int32_t> tb = {7}, tc = {9};
  g.score(b, tb, 1, from_b);
  g.score(c, tc, 1, from_c);
  EXPECT_EQ(kv.stats().num_cow_copies, 2);  // the fork's first append, one per group
  const std::vector<int32_t> tb2 = {5};  // b reads its block again after c wrote its own
  g.score(b, tb2, 1, from_b);
  const std::vector<int32_t> b_tokens = {7, 5};
  for (const auto& [token, logits] : {std::pair{b_tokens, from_b}, std::pair{tc, from_c}}) {
    Grouped fresh("tiny-gemma3", 256, 16);
    const kvcache::KvSeqId f = fresh.runner->kv().add_sequence(64, fresh.ns);
    std::vector<float> want_prefix, want;
    fresh.score(f, first, kBlock, want_prefix);
    fresh.runner->kv().free_sequence(f);  // its blocks stay cached: the same hit as b's
    kvcache::KvGroupMatch m = fresh.runner->kv().match_prefix(second, fresh.ns);
    const kvcache::KvSeqId f2 = fresh.runner->kv().add_sequence(64, fresh.ns);
    fresh.runner->kv().adopt(f2, std::move(m));
    fresh.score(f2, std::span<const int32_t>(second).subspan(28), kBlock, want_prefix);
    fresh.score(f2, token, 1, want);
    expect_same_bits(logits, want, 0, g.vocab());
  }
  kv.check_integrity();
}

TEST(KvGroups, OutOfPagesIsAnError) {
  Grouped g("tiny-gemma3", 8, 16);
  const kvcache::KvSeqId a = g.runner->kv().add_sequence(64, g.ns);
  const std::vector<int32_t> tokens = test_tokens(g.vocab(), 16, 0);
  std::vector<float> logits(16 * static_cast<size_t>(g.vocab()));
  const GroupedKv::StepSeq s{a, tokens};
  const Status st = g.runner->step(std::span<const GroupedKv::StepSeq>(&s, 1), true, logits.data());
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("out of KV pages"), std::string::npos);
  EXPECT_EQ(g.runner->kv().length(a), 0);
}

}  // namespace
}  // namespace pagoda::engine
