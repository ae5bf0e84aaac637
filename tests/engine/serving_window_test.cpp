// Windowed KV through continuous batching: StreamingLLM (--kv-window/--kv-sinks) and a
// sliding-window model that frees its old blocks, with several concurrent requests, n > 1
// (independent choices: windowed sequences are never forked nor prefix-cached), preemption under
// a small pool, and outputs equal to Engine::generate with the same window.
#include "model/model_factory.h"
#include "serving_test_util.h"

namespace pagoda {
namespace {

using testing::Recorder;

engine::CompletionRequest completion(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  engine::CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling = engine::SamplingParams();
  r.sampling.temperature = 0.9f;
  r.sampling.seed = seed;
  return r;
}

std::vector<int32_t> generate(engine::Engine& e, const engine::CompletionRequest& r, int choice) {
  engine::GenerateRequest g;
  g.prompt = r.prompt;
  g.max_new_tokens = r.max_tokens;
  g.sampling = r.sampling;
  g.sampling.seed += static_cast<uint64_t>(choice);
  auto out = e.generate(g);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out.is_ok() ? out->tokens : std::vector<int32_t>{};
}

struct Run {
  engine::CompletionRequest request;
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
};

// Submits `prompts` (request 1 with n = 3), runs to the end, checks every choice against
// `reference` and returns the metrics.
engine::ServingMetrics serve_and_compare(engine::ServingEngine& se, engine::Engine& reference,
                                         const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens,
                                         bool expect_equal) {
  std::vector<Run> runs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Run run{completion(prompts[i], max_tokens + static_cast<int64_t>(i) * 5, 50 + i)};
    if (i == 1) run.request.n = 3;
    EXPECT_TRUE(se.submit(run.request, run.recorder).is_ok());
    runs.push_back(std::move(run));
  }
  testing::run_to_end(se);
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_TRUE(runs[i].recorder->status().is_ok()) << runs[i].recorder->status().message();
    EXPECT_EQ(runs[i].recorder->usage().cached_tokens, 0);  // never prefix-cached
    for (int c = 0; c < runs[i].request.n; ++c) {
      EXPECT_EQ(static_cast<int64_t>(runs[i].recorder->choice(c).tokens.size()), runs[i].request.max_tokens);
      if (expect_equal) {
        EXPECT_EQ(runs[i].recorder->choice(c).tokens, generate(reference, runs[i].request, c)) << "choice " << c;
      }
    }
  }
  engine::ServingMetrics m = se.metrics();
  testing::expect_clean(se);
  EXPECT_EQ(m.kv_blocks_cached, 0);
  return m;
}

TEST(ServingWindow, StreamingRequestsEqualGenerateAndRunPastThePool) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.kv_window = 48;  // 3 blocks of 16
  ec.kv_sinks = 4;    // 1 block
  ec.kv_cache_bytes = testing::pool_bytes(*s, 26);  // 416 tokens: 6 sequences of up to 4 blocks fit
  ec.max_context = 512;
  ec.num_threads = 1;
  auto reference = engine::Engine::create(s->model, ec, s->clock, s->logger);
  ASSERT_TRUE(reference.is_ok());
  engine::ServingConfig sc;
  sc.max_num_seqs = 8;
  sc.max_num_batched_tokens = 64;
  auto se = testing::serving(*s, ec, sc);
  // Prompts shorter than the window, so blocks are dropped only while decoding (one token per
  // step, as generate does): 300 tokens each (with n = 3: 6 x 300 tokens, far past the 416-token pool).
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(testing::mixed_prompt(*s->tokenizer, i));
  const engine::ServingMetrics m = serve_and_compare(*se, **reference, prompts, 300, /*expect_equal=*/true);
  EXPECT_EQ(m.preemptions, 0);
}

TEST(ServingWindow, StreamingUnderPreemptionFinishesWithinItsBudget) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.kv_window = 48;
  ec.kv_sinks = 4;
  ec.kv_cache_bytes = testing::pool_bytes(*s, 9);  // two sequences' 4 blocks + 1
  ec.max_context = 512;
  ec.num_threads = 1;
  auto reference = engine::Engine::create(s->model, ec, s->clock, s->logger);
  ASSERT_TRUE(reference.is_ok());
  engine::ServingConfig sc;
  sc.max_num_seqs = 6;
  sc.max_num_batched_tokens = 64;
  auto se = testing::serving(*s, ec, sc);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(testing::mixed_prompt(*s->tokenizer, i));
  // A recomputed StreamingLLM sequence sees other windows than the first time (its prefill
  // drops blocks in chunks), so only lengths and the pool are checked here.
  const engine::ServingMetrics m = serve_and_compare(*se, **reference, prompts, 120, /*expect_equal=*/false);
  EXPECT_GT(m.preemptions, 0);
}

TEST(ServingWindow, SlidingWindowModelUnderPreemptionEqualsGenerate) {
  model::ModelShape shape = model::find_model_shape("tiny").value();
  shape.sliding_window = 20;
  auto file = model::make_random_model(shape, DType::kF32, 11);
  ASSERT_TRUE(file.is_ok());
  auto vocab = model::vocab_from_gguf(*file);
  ASSERT_TRUE(vocab.is_ok());
  auto tokenizer = std::make_shared<const model::Tokenizer>(model::Tokenizer::create(std::move(vocab).value()).value());
  std::shared_ptr<const model::LlamaModel> model = model::LlamaModel::load(std::move(file).value()).value();
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  engine::EngineConfig ec;
  ec.num_threads = 1;
  ec.block_size = 4;
  ec.max_batch_tokens = 16;
  // One sequence holds window + chunk + 2 blocks = 44 tokens (11 blocks) at most; 13 blocks
  // hold about two of the six sequences below at once.
  ec.kv_cache_bytes = 13 * 2 * 2 * 4 * 2 * 16 * 4;  // 13 blocks: 2 layers x K,V x 4 tokens x 2 heads x 16 x f32
  auto reference = engine::Engine::create(model, ec, clock, logger);
  ASSERT_TRUE(reference.is_ok()) << reference.status().message();
  ASSERT_EQ((*reference)->kv_plan().num_blocks, 13);
  auto engine = engine::Engine::create(model, ec, clock, logger);
  ASSERT_TRUE(engine.is_ok());
  engine::ServingConfig sc;
  sc.max_num_seqs = 6;
  sc.max_num_batched_tokens = 16;
  auto se = engine::ServingEngine::create(std::move(engine).value(), tokenizer, sc);
  ASSERT_TRUE(se.is_ok()) << se.status().message();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    // Short prompts (admitted with few blocks) growing past the window while they decode.
    for (int j = 0; j < 5 + 2 * i; ++j) p.push_back(static_cast<int32_t>((j * 13 + i * 29 + 3) % shape.n_vocab));
    prompts.push_back(p);
  }
  // Exact masks: recomputing after preemption reproduces the same KV, so outputs are equal.
  const engine::ServingMetrics m = serve_and_compare(**se, **reference, prompts, 48, /*expect_equal=*/true);
  EXPECT_GT(m.preemptions, 0);
}

}  // namespace
}  // namespace pagoda
