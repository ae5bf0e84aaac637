// ServingEngine over stories260K: many concurrent requests of mixed lengths (through step()
// and through the loop thread) give exactly Engine::generate's tokens; preemption under a tiny
// pool changes nothing but the count; n > 1 shares blocks; aborts, queue limits, shutdown and
// the metrics.
#include <atomic>
#include <cmath>
#include <thread>

#include "core/rng.h"
#include "model/model_factory.h"
#include "serving_test_util.h"

namespace pagoda {
namespace {

using testing::Recorder;

struct Submitted {
  engine::CompletionRequest request;
  std::shared_ptr<Recorder> recorder;
};

engine::CompletionRequest completion(std::vector<int32_t> prompt, int64_t max_tokens) {
  engine::CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // Engine::generate does not stop at EOS either
  return r;
}

std::vector<int32_t> reference_tokens(testing::Stories& s, const engine::CompletionRequest& r, uint64_t seed_offset = 0) {
  engine::GenerateRequest g;
  g.prompt = r.prompt;
  g.max_new_tokens = r.max_tokens;
  g.sampling = r.sampling;
  g.sampling.seed += seed_offset;
  auto out = s.reference->generate(g);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out->tokens;
}

std::vector<Submitted> submit_mixed(testing::Stories& s, engine::ServingEngine& se, int count, bool sampled) {
  std::vector<Submitted> all;
  for (int i = 0; i < count; ++i) {
    Submitted sub{completion(testing::mixed_prompt(*s.tokenizer, i), 4 + (i * 7) % 29), std::make_shared<Recorder>()};
    if (sampled) {
      sub.request.sampling = engine::SamplingParams();
      sub.request.sampling.temperature = 0.9f;
      sub.request.sampling.seed = 100 + i;
    }
    EXPECT_TRUE(se.submit(sub.request, sub.recorder).is_ok());
    all.push_back(std::move(sub));
  }
  return all;
}

void expect_equal_to_reference(testing::Stories& s, std::vector<Submitted>& all) {
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(all[i].recorder->finished());
    EXPECT_TRUE(all[i].recorder->status().is_ok()) << all[i].recorder->status().message();
    EXPECT_EQ(all[i].recorder->choice(0).tokens, reference_tokens(s, all[i].request));
    EXPECT_EQ(all[i].recorder->choice(0).reason, engine::FinishReason::kLength);
    EXPECT_EQ(all[i].recorder->choice(0).text,
              testing::continuation(*s.tokenizer, all[i].request.prompt, all[i].recorder->choice(0).tokens));
  }
}

TEST(ServingEngine, ConcurrentMixedRequestsEqualGenerate) {
  auto s = testing::load_stories();
  engine::ServingConfig sc;
  sc.max_num_seqs = 6;            // fewer slots than requests: they join and leave
  sc.max_num_batched_tokens = 24;  // long prompts are chunked beside decodes
  auto se = testing::serving(*s, {}, sc);
  std::vector<Submitted> all = submit_mixed(*s, *se, 14, /*sampled=*/false);
  testing::run_to_end(*se);
  expect_equal_to_reference(*s, all);
  const engine::ServingMetrics m = se->metrics();
  int64_t prompt = 0, generated = 0;
  for (const Submitted& sub : all) {
    prompt += static_cast<int64_t>(sub.request.prompt.size());
    generated += sub.request.max_tokens;
    EXPECT_EQ(sub.recorder->usage().prompt_tokens, static_cast<int64_t>(sub.request.prompt.size()));
    EXPECT_EQ(sub.recorder->usage().completion_tokens, sub.request.max_tokens);
  }
  EXPECT_EQ(m.prompt_tokens, prompt);
  EXPECT_EQ(m.generation_tokens, generated);
  EXPECT_EQ(m.finished_length, 14);
  EXPECT_EQ(m.finished_stop + m.finished_abort + m.finished_error, 0);
  EXPECT_EQ(m.e2e.count, 14);
  EXPECT_EQ(m.ttft.count, 14);
  EXPECT_EQ(m.queue.count, 14);
  EXPECT_EQ(m.inter_token.count, generated - 14);
  EXPECT_GT(m.prefix_hit_tokens, 0);  // the story prompts share their first blocks
  EXPECT_LE(m.prefix_hit_tokens, m.prefix_queried_tokens);
  // Fewer steps than one request at a time would need (decodes were batched).
  EXPECT_LT(m.steps, generated);
  testing::expect_clean(*se);
}

TEST(ServingEngine, StepBudgetOutOfRangeIsAClearError) {
  auto s = testing::load_stories();
  for (double bad : {-1.0, 4e6, std::nan("")}) {
    engine::ServingConfig sc;
    sc.step_budget_ms = bad;
    engine::EngineConfig ec;
    ec.num_threads = 1;
    auto se = engine::ServingEngine::create(engine::Engine::create(s->model, ec, s->clock, s->logger).value(), s->tokenizer, sc);
    ASSERT_FALSE(se.is_ok()) << bad;
    EXPECT_EQ(se.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(se.status().message().find("step_budget_ms"), std::string::npos);
  }
  engine::ServingConfig off;
  off.step_budget_ms = 0;  // off is valid
  auto se = testing::serving(*s, {}, off);
  EXPECT_NE(se, nullptr);
}

// Step limits above what the engine can run are refused with the limit named, never clipped;
// 0 (the default) takes the limit: tokens = the engine's rows, sequences = min(64, tokens).
TEST(ServingEngine, StepLimitsAboveTheEngineAreRefusedAndZeroTakesTheLimit) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.num_threads = 1;
  ec.max_batch_tokens = 16;
  auto create = [&](int64_t seqs, int64_t tokens) {
    engine::ServingConfig sc;
    sc.max_num_seqs = seqs;
    sc.max_num_batched_tokens = tokens;
    return engine::ServingEngine::create(engine::Engine::create(s->model, ec, s->clock, s->logger).value(), s->tokenizer, sc);
  };
  auto too_many_tokens = create(0, 17);
  ASSERT_FALSE(too_many_tokens.is_ok());
  EXPECT_EQ(too_many_tokens.status().message(),
            "max_num_batched_tokens 17 is more than the rows of one forward pass (16, the engine's max_batch_tokens)");
  auto too_many_seqs = create(9, 8);
  ASSERT_FALSE(too_many_seqs.is_ok());
  EXPECT_EQ(too_many_seqs.status().message(),
            "max_num_seqs 9 is more than the tokens per step (8): every running sequence needs a row");
  EXPECT_FALSE(create(-1, 0).is_ok());
  auto defaults = create(0, 0);
  ASSERT_TRUE(defaults.is_ok()) << defaults.status().message();
  engine::CompletionRequest r = completion(testing::mixed_prompt(*s->tokenizer, 0), 4);
  r.n = 17;  // more than the resolved max_num_seqs: min(64, 16 rows)
  auto refused = (*defaults)->submit(r, std::make_shared<Recorder>());
  EXPECT_EQ(refused.status().message(), "n must be in [1, 16] (max_num_seqs)");
  auto exact = create(16, 16);
  EXPECT_TRUE(exact.is_ok()) << exact.status().message();
}

TEST(ServingEngine, LoopThreadGivesTheSameOutputs) {
  auto s = testing::load_stories();
  engine::ServingConfig sc;
  sc.max_num_seqs = 5;
  sc.max_num_batched_tokens = 32;
  auto se = testing::serving(*s, {}, sc);
  se->start();
  std::vector<Submitted> all = submit_mixed(*s, *se, 10, /*sampled=*/true);
  se->check_integrity();  // between two steps of the loop
  for (Submitted& sub : all) sub.recorder->wait();
  se->shutdown(/*drain=*/true);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].recorder->choice(0).tokens, reference_tokens(*s, all[i].request)) << "request " << i;
  }
  testing::expect_clean(*se);
}

TEST(ServingEngine, PreemptionUnderATinyPoolKeepsOutputsIdentical) {
  auto s = testing::load_stories();
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    engine::EngineConfig ec;
    ec.kv_cache_bytes = testing::pool_bytes(*s, 10);  // 160 tokens for 8 requests
    engine::ServingConfig sc;
    sc.max_num_seqs = 8;
    sc.max_num_batched_tokens = 64;
    auto se = testing::serving(*s, ec, sc);
    std::vector<Submitted> all = submit_mixed(*s, *se, 8, sampled);
    // Three choices forked from one prompt, preempted one by one, resumed from the cache.
    engine::CompletionRequest multi = completion(testing::mixed_prompt(*s->tokenizer, 6), 40);
    multi.n = 3;
    multi.sampling = all[0].request.sampling;
    auto multi_rec = std::make_shared<Recorder>();
    ASSERT_TRUE(se->submit(multi, multi_rec).is_ok());
    testing::run_to_end(*se);
    expect_equal_to_reference(*s, all);
    ASSERT_TRUE(multi_rec->status().is_ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(multi_rec->choice(i).tokens, reference_tokens(*s, multi, i)) << "choice " << i;
    const engine::ServingMetrics m = se->metrics();
    EXPECT_GT(m.preemptions, 0);
    EXPECT_GT(multi_rec->usage().preemptions, 0);
    int64_t per_request = multi_rec->usage().preemptions;
    for (const Submitted& sub : all) per_request += sub.recorder->usage().preemptions;
    EXPECT_EQ(per_request, m.preemptions);
    testing::expect_clean(*se);
  }
}

TEST(ServingEngine, PriorityAdmitsFirstAndIsPreemptedLast) {
  auto s = testing::load_stories();
  {
    engine::ServingConfig one;
    one.max_num_seqs = 1;
    auto se = testing::serving(*s, {}, one);
    auto low = std::make_shared<Recorder>(), high = std::make_shared<Recorder>();
    engine::CompletionRequest r = completion(testing::mixed_prompt(*s->tokenizer, 1), 3);
    ASSERT_TRUE(se->submit(r, low).is_ok());
    r.priority = 5;
    ASSERT_TRUE(se->submit(r, high).is_ok());
    ASSERT_TRUE(se->step());
    EXPECT_EQ(high->choice(0).tokens.size(), 1u);  // admitted first despite arriving later
    EXPECT_TRUE(low->choice(0).tokens.empty());
    testing::run_to_end(*se);
    EXPECT_EQ(low->choice(0).tokens, high->choice(0).tokens);
    testing::expect_clean(*se);
  }
  engine::EngineConfig ec;
  ec.kv_cache_bytes = testing::pool_bytes(*s, 8);
  auto se = testing::serving(*s, ec, {});
  std::vector<Submitted> all;
  for (int i = 0; i < 5; ++i) {
    all.push_back({completion(testing::mixed_prompt(*s->tokenizer, 2 * i), 40), std::make_shared<Recorder>()});
    all.back().request.priority = i == 2 ? 10 : 0;
    ASSERT_TRUE(se->submit(all.back().request, all.back().recorder).is_ok());
  }
  testing::run_to_end(*se);
  expect_equal_to_reference(*s, all);
  EXPECT_GT(se->metrics().preemptions, 0);
  EXPECT_EQ(all[2].recorder->usage().preemptions, 0);
  EXPECT_GT(se->metrics().evicted_blocks, 0);  // the tiny pool recycles cached blocks
  testing::expect_clean(*se);
}

TEST(ServingEngine, ParallelChoicesShareThePromptAndEqualSeededGenerate) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  engine::CompletionRequest r = completion(s->tokenizer->encode(testing::kStoryText, true, false), 12);
  r.n = 3;
  r.sampling = engine::SamplingParams();
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  auto rec = std::make_shared<Recorder>();
  ASSERT_TRUE(se->submit(r, rec).is_ok());
  const int64_t prompt_blocks = (static_cast<int64_t>(r.prompt.size()) + 15) / 16;
  ASSERT_TRUE(se->step());  // the prompt (one chunk), then the fork and the first samples
  // Three choices hold the prompt's blocks once, plus at most a private last block each.
  EXPECT_LE(se->metrics().kv_blocks_in_use, prompt_blocks + 3);
  EXPECT_LT(se->metrics().kv_blocks_in_use, 3 * prompt_blocks);
  testing::run_to_end(*se);
  ASSERT_TRUE(rec->status().is_ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rec->choice(i).tokens, reference_tokens(*s, r, i)) << "choice " << i;
  EXPECT_NE(rec->choice(0).tokens, rec->choice(1).tokens);
  EXPECT_EQ(rec->usage().completion_tokens, 36);
  EXPECT_EQ(se->metrics().finished_length, 3);  // counted per choice
  testing::expect_clean(*se);
}

// OpenAI's bias and penalties in batched steps with parallel choices under a pool small enough
// to preempt: each choice equals Engine::generate with the same seed (whose completion is its
// own token list), the penalties change the greedy output, and a +100 bias forces its token.
TEST(ServingEngine, BiasAndPenaltiesInBatchedStepsEqualGenerate) {
  auto s = testing::load_stories();
  engine::EngineConfig ec;
  ec.kv_cache_bytes = testing::pool_bytes(*s, 8);  // 128 tokens for 5 requests of up to ~60
  engine::ServingConfig sc;
  sc.max_num_seqs = 5;
  auto se = testing::serving(*s, ec, sc);
  std::vector<Submitted> all;
  for (int i = 0; i < 4; ++i) {
    Submitted sub{completion(testing::mixed_prompt(*s->tokenizer, i), 24), std::make_shared<Recorder>()};
    sub.request.sampling = engine::SamplingParams();
    sub.request.sampling.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    sub.request.sampling.seed = 40 + i;
    sub.request.sampling.frequency_penalty = 1.5f;
    sub.request.sampling.presence_penalty = 0.5f;
    sub.request.sampling.logit_bias = {{13, -100.0f}};
    ASSERT_TRUE(se->submit(sub.request, sub.recorder).is_ok());
    all.push_back(std::move(sub));
  }
  Submitted forced{completion(testing::mixed_prompt(*s->tokenizer, 9), 6), std::make_shared<Recorder>()};
  forced.request.sampling = engine::SamplingParams::greedy();
  forced.request.sampling.logit_bias = {{300, 100.0f}};
  ASSERT_TRUE(se->submit(forced.request, forced.recorder).is_ok());
  testing::run_to_end(*se);
  EXPECT_GT(se->metrics().preemptions, 0);
  expect_equal_to_reference(*s, all);
  for (const Submitted& sub : all) {
    for (int32_t t : sub.recorder->choice(0).tokens) EXPECT_NE(t, 13);
  }
  engine::CompletionRequest plain = all[0].request;
  plain.sampling.frequency_penalty = plain.sampling.presence_penalty = 0.0f;
  EXPECT_NE(reference_tokens(*s, plain), all[0].recorder->choice(0).tokens);  // the penalties did something
  EXPECT_EQ(forced.recorder->choice(0).tokens, std::vector<int32_t>(6, 300));
  testing::expect_clean(*se);
}

TEST(ServingEngine, AbortFreesBlocksWithinOneStep) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  auto keep = std::make_shared<Recorder>(), drop = std::make_shared<Recorder>(), queued = std::make_shared<Recorder>();
  auto kept_id = se->submit(completion(testing::mixed_prompt(*s->tokenizer, 2), 40), keep);
  auto id = se->submit(completion(testing::mixed_prompt(*s->tokenizer, 4), 40), drop);
  ASSERT_TRUE(kept_id.is_ok() && id.is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(se->step());
  const int64_t both = se->metrics().kv_blocks_in_use;
  se->abort(*id);
  se->abort(12345);  // unknown: ignored
  ASSERT_TRUE(se->step());
  EXPECT_TRUE(drop->finished());
  EXPECT_EQ(drop->status().code(), StatusCode::kAborted);
  EXPECT_GT(drop->usage().completion_tokens, 0);
  EXPECT_LT(se->metrics().kv_blocks_in_use, both);
  // Aborting a request still in the inbox: it never runs.
  auto qid = se->submit(completion(testing::mixed_prompt(*s->tokenizer, 1), 5), queued);
  ASSERT_TRUE(qid.is_ok());
  se->abort(*qid);
  se->abort(*kept_id);
  se->step();
  EXPECT_EQ(queued->status().code(), StatusCode::kAborted);
  EXPECT_EQ(keep->status().code(), StatusCode::kAborted);
  EXPECT_EQ(se->metrics().kv_blocks_in_use, 0);
  EXPECT_EQ(se->metrics().finished_abort, 3);
  EXPECT_FALSE(se->step());
  testing::expect_clean(*se);
}

// A client that disconnects: its observer aborts from on_tokens, on the loop thread.
class Disconnecting final : public engine::RequestObserver {
 public:
  engine::ServingEngine* engine = nullptr;
  engine::RequestId id = 0;
  std::atomic<bool> ready{false};
  Recorder record;
  void on_tokens(std::span<const engine::TokenEvent> events) override {
    while (!ready.load()) std::this_thread::yield();  // id is set right after submit returns
    record.on_tokens(events);
    engine->abort(id);
  }
  void on_choice_end(const engine::ChoiceEnd& end) override { record.on_choice_end(end); }
  void on_finish(const Status& status, const engine::RequestUsage& usage) override { record.on_finish(status, usage); }
};

TEST(ServingEngine, DisconnectAbortsOnTheNextStep) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  se->start();
  auto obs = std::make_shared<Disconnecting>();
  obs->engine = se.get();
  auto other = std::make_shared<Recorder>();
  auto id = se->submit(completion(testing::mixed_prompt(*s->tokenizer, 3), 400), obs);
  ASSERT_TRUE(id.is_ok());
  obs->id = *id;
  obs->ready = true;
  ASSERT_TRUE(se->submit(completion(testing::mixed_prompt(*s->tokenizer, 5), 20), other).is_ok());
  obs->record.wait();
  other->wait();
  EXPECT_EQ(obs->record.status().code(), StatusCode::kAborted);
  EXPECT_EQ(obs->record.usage().completion_tokens, 1);  // aborted before the second forward
  EXPECT_TRUE(other->status().is_ok());
  se->check_integrity();
  se->shutdown(/*drain=*/true);
  testing::expect_clean(*se);
}

TEST(ServingEngine, QueueLimitAndShutdown) {
  auto s = testing::load_stories();
  engine::ServingConfig sc;
  sc.max_waiting = 2;
  auto se = testing::serving(*s, {}, sc);
  std::vector<std::shared_ptr<Recorder>> recs;
  for (int i = 0; i < 3; ++i) {
    recs.push_back(std::make_shared<Recorder>());
    auto id = se->submit(completion(testing::mixed_prompt(*s->tokenizer, i), 6), recs.back());
    EXPECT_EQ(id.status().code(), i < 2 ? StatusCode::kOk : StatusCode::kUnavailable);
  }
  ASSERT_TRUE(se->step());  // both admitted: the queue has room again
  recs.push_back(std::make_shared<Recorder>());
  ASSERT_TRUE(se->submit(completion(testing::mixed_prompt(*s->tokenizer, 3), 6), recs.back()).is_ok());
  se->shutdown(/*drain=*/true);  // finishes everything, refuses new work
  for (int i : {0, 1, 3}) {
    EXPECT_TRUE(recs[i]->status().is_ok());
    EXPECT_EQ(recs[i]->choice(0).tokens.size(), 6u);
  }
  EXPECT_EQ(se->submit(completion({1, 2}, 2), std::make_shared<Recorder>()).status().code(), StatusCode::kUnavailable);
  se->shutdown(false);  // idempotent
  testing::expect_clean(*se);

  // Without draining: every in-flight and waiting request ends kUnavailable.
  engine::ServingConfig one;
  one.max_num_seqs = 2;
  auto se2 = testing::serving(*s, {}, one);
  std::vector<std::shared_ptr<Recorder>> more;
  for (int i = 0; i < 4; ++i) {
    more.push_back(std::make_shared<Recorder>());
    ASSERT_TRUE(se2->submit(completion(testing::mixed_prompt(*s->tokenizer, i), 400), more.back()).is_ok());
  }
  ASSERT_TRUE(se2->step());
  ASSERT_TRUE(se2->step());
  EXPECT_EQ(se2->metrics().running, 2);
  EXPECT_EQ(se2->metrics().waiting, 2);
  se2->shutdown(/*drain=*/false);
  for (auto& r : more) {
    ASSERT_TRUE(r->finished());
    EXPECT_EQ(r->status().code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(se2->metrics().finished_abort, 4);
  testing::expect_clean(*se2);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

TEST(ServingEngine, RandomModelBatchedDecodesEqualGenerate) {
  // A random "tiny" model with a synthetic vocab. F32 weights: 12 concurrent requests decode in
  // steps of >= 8 rows (the matmul's sgemm path) while generate decodes one row at a time, and
  // the tokens still agree. Q8_0 weights: steps of up to Matmul::kDecodeMaxTokens rows stay on
  // the decode kernels (activations quantized to Q8_0 per token, whatever the group), so a
  // sequence's tokens do not depend on which others share its steps.
  for (DType dtype : {DType::kF32, DType::kQ8_0}) {
    const bool decode_path_only = false;
    SCOPED_TRACE(dtype_name(dtype));
    ManualClock clock;
    Logger logger(LogLevel::kSilent);
    const model::ModelShape shape = model::find_model_shape("tiny").value();
    auto file = model::make_random_model(shape, dtype, 99);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    auto tok = std::make_shared<const model::Tokenizer>(
        model::Tokenizer::create(model::vocab_from_gguf(*file).value()).value());
    std::shared_ptr<const model::LlamaModel> m = model::LlamaModel::load(std::move(file).value()).value();
    engine::EngineConfig ec;
    ec.num_threads = 1;
    ec.max_context = 256;
    auto reference = engine::Engine::create(m, ec, clock, logger).value();
    engine::ServingConfig sc;
    sc.max_num_seqs = decode_path_only ? 7 : 12;
    sc.max_num_batched_tokens = decode_path_only ? 7 : 48;
    auto se = engine::ServingEngine::create(engine::Engine::create(m, ec, clock, logger).value(), tok, sc).value();
    std::vector<Submitted> all;
    Rng rng(5);
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> prompt(decode_path_only ? 1 + i % 7 : 3 + (i * 11) % 40);
      for (int32_t& t : prompt) t = static_cast<int32_t>(3 + rng.next_u64() % (shape.n_vocab - 3));
      all.push_back({completion(std::move(prompt), 10 + i), std::make_shared<Recorder>()});
      ASSERT_TRUE(se->submit(all.back().request, all.back().recorder).is_ok());
    }
    testing::run_to_end(*se);
    for (size_t i = 0; i < all.size(); ++i) {
      engine::GenerateRequest g;
      g.prompt = all[i].request.prompt;
      g.max_new_tokens = all[i].request.max_tokens;
      EXPECT_EQ(all[i].recorder->choice(0).tokens, reference->generate(g).value().tokens) << "request " << i;
    }
    testing::expect_clean(*se);
  }
}

}  // namespace
}  // namespace pagoda
