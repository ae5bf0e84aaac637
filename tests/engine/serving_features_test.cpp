// ServingEngine request features on stories260K: stop strings (text ends before the match,
// held back across tokens), stop token ids, EOS, max_tokens clipped to the context and the
// pool, logprobs against Engine::score, cache_salt isolation, refusals; TextStream itself.
#include <cmath>

#include "engine/text_stream.h"
#include "serving_test_util.h"

namespace pagoda {
namespace {

using testing::Recorder;

engine::CompletionRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  engine::CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

std::shared_ptr<Recorder> run_one(engine::ServingEngine& se, const engine::CompletionRequest& r) {
  auto rec = std::make_shared<Recorder>();
  auto id = se.submit(r, rec);
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  testing::run_to_end(se);
  EXPECT_TRUE(rec->finished());
  return rec;
}

std::vector<int32_t> generate(testing::Stories& s, const std::vector<int32_t>& prompt, int64_t n) {
  engine::GenerateRequest g;
  g.prompt = prompt;
  g.max_new_tokens = n;
  return s.reference->generate(g).value().tokens;
}

TEST(TextStream, HoldsBackPossibleStopStringsAndCutsBeforeTheMatch) {
  auto s = testing::load_stories();
  const std::vector<int32_t> ids = s->tokenizer->encode("Hello world, said Tom.", false, false);
  auto run = [&](std::vector<std::string> stops, bool* stopped) {
    engine::TextStream stream(*s->tokenizer, std::move(stops));
    std::string out;
    *stopped = false;
    for (int32_t id : ids) {
      if (stream.push(id, out)) {
        *stopped = true;
        return out;
      }
    }
    stream.finish(out);
    return out;
  };
  bool stopped = false;
  EXPECT_EQ(run({"lo w"}, &stopped), "Hel");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"zzz", ", s"}, &stopped), "Hello world");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"Tom!"}, &stopped), "Hello world, said Tom.");  // a held-back "Tom" is released
  EXPECT_FALSE(stopped);
  // While "Tom" could still become "Tom!", it is held back.
  engine::TextStream stream(*s->tokenizer, {"Tom!"});
  std::string out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) ASSERT_FALSE(stream.push(ids[i], out));
  EXPECT_EQ(out, "Hello world, said ");
}

TEST(ServingFeatures, StopStringSpanningTokensEndsTheTextBeforeIt) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  const std::vector<int32_t> prompt = s->tokenizer->encode("Once upon a time", true, false);
  const std::vector<int32_t> g = generate(*s, prompt, 40);
  const std::string full = s->tokenizer->decode(g);
  // Four bytes across the boundary between generated tokens 9 and 10.
  const size_t cut = s->tokenizer->decode(std::span<const int32_t>(g).first(10)).size();
  ASSERT_GE(cut, 2u);
  const std::string stop = full.substr(cut - 2, 4);
  engine::CompletionRequest r = greedy(prompt, 40);
  r.stop = {"never in this text", stop};
  auto rec = run_one(*se, r);
  EXPECT_EQ(rec->choice(0).reason, engine::FinishReason::kStop);
  EXPECT_EQ(rec->choice(0).text, full.substr(0, full.find(stop)));
  size_t k = 10;  // tokens until the decoded text holds the whole stop string
  while (s->tokenizer->decode(std::span<const int32_t>(g).first(k)).find(stop) == std::string::npos) ++k;
  EXPECT_EQ(rec->choice(0).tokens, std::vector<int32_t>(g.begin(), g.begin() + k));
  // No stop string found: the whole text, ended by length.
  r.stop = {"never in this text"};
  auto all = run_one(*se, r);
  EXPECT_EQ(all->choice(0).text, full);
  EXPECT_EQ(all->choice(0).reason, engine::FinishReason::kLength);
  EXPECT_EQ(se->metrics().finished_stop, 1);
  EXPECT_EQ(se->metrics().finished_length, 1);
  testing::expect_clean(*se);
}

TEST(ServingFeatures, StopTokenIdsAndEos) {
  auto s = testing::load_stories();
  const std::vector<int32_t> prompt = s->tokenizer->encode("Tom and Lily", true, false);
  const std::vector<int32_t> g = generate(*s, prompt, 20);
  const int32_t stop_id = g[6];
  const size_t first = std::find(g.begin(), g.end(), stop_id) - g.begin();
  const std::vector<int32_t> before(g.begin(), g.begin() + first);
  {
    auto se = testing::serving(*s, {}, {});
    engine::CompletionRequest r = greedy(prompt, 20);
    r.stop_token_ids = {stop_id};
    auto rec = run_one(*se, r);
    EXPECT_EQ(rec->choice(0).tokens, before);  // the stop token is not shown...
    EXPECT_EQ(rec->usage().completion_tokens, static_cast<int64_t>(first) + 1);  // ...but counted
    EXPECT_EQ(rec->choice(0).reason, engine::FinishReason::kStop);
    EXPECT_EQ(rec->choice(0).text, testing::continuation(*s->tokenizer, prompt, before));
    testing::expect_clean(*se);
  }
  // The same token as the vocabulary's EOS: it ends the choice unless ignore_eos.
  model::Vocab vocab = s->tokenizer->vocab();
  vocab.eos_id = stop_id;
  auto eos_tok = std::make_shared<const model::Tokenizer>(model::Tokenizer::create(vocab).value());
  auto se = testing::serving(*s, {}, {}, eos_tok);
  engine::CompletionRequest r = greedy(prompt, 20);
  r.ignore_eos = false;
  EXPECT_EQ(run_one(*se, r)->choice(0).tokens, before);
  r.ignore_eos = true;
  EXPECT_EQ(run_one(*se, r)->choice(0).tokens, g);
  testing::expect_clean(*se);
}

TEST(ServingFeatures, MaxTokensClippedToContextAndPoolAndTooLargeFailsFast) {
  auto s = testing::load_stories(/*max_context=*/64);
  const std::vector<int32_t> prompt = testing::mixed_prompt(*s->tokenizer, 2);
  const int64_t p = static_cast<int64_t>(prompt.size());
  ASSERT_LT(p, 30);
  {
    auto se = testing::serving(*s, {}, {});
    auto rec = run_one(*se, greedy(prompt, 1000));
    EXPECT_EQ(rec->choice(0).tokens, generate(*s, prompt, 64 - p));
    EXPECT_EQ(rec->choice(0).reason, engine::FinishReason::kLength);
    std::vector<int32_t> full(64, 1);
    EXPECT_EQ(se->submit(greedy(full, 1), std::make_shared<Recorder>()).status().code(), StatusCode::kTooLarge);
    testing::expect_clean(*se);
  }
  engine::EngineConfig ec;
  ec.kv_cache_bytes = testing::pool_bytes(*s, 2);  // 32 tokens
  auto se = testing::serving(*s, ec, {});
  std::vector<int32_t> long_prompt(40, 5);
  auto refused = se->submit(greedy(long_prompt, 1), std::make_shared<Recorder>());
  EXPECT_EQ(refused.status().code(), StatusCode::kTooLarge);
  EXPECT_NE(refused.status().message().find("KV cache"), std::string::npos) << refused.status().message();
  auto rec = run_one(*se, greedy(prompt, 1000));  // the last token needs no KV slot
  EXPECT_EQ(rec->choice(0).tokens, generate(*s, prompt, 32 - p + 1));
  testing::expect_clean(*se);
}

TEST(ServingFeatures, LogprobsAreTheLogSoftmaxOfScore) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  engine::CompletionRequest r = greedy(s->tokenizer->encode("The cat sat", true, false), 8);
  r.logprobs = 3;
  auto rec = run_one(*se, r);
  const std::vector<int32_t>& g = rec->choice(0).tokens;
  ASSERT_EQ(g.size(), 8u);
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), g.begin(), g.end() - 1);
  const std::vector<float> logits = s->reference->score(all).value();
  const int64_t n_vocab = s->model->config().n_vocab;
  for (size_t j = 0; j < g.size(); ++j) {
    const float* row = logits.data() + (r.prompt.size() - 1 + j) * n_vocab;
    double z = 0;
    for (int64_t v = 0; v < n_vocab; ++v) z += std::exp(static_cast<double>(row[v]));
    const engine::TokenEvent& e = rec->choice(0).events[j];
    EXPECT_EQ(e.chosen.token, g[j]);
    EXPECT_NEAR(e.chosen.logprob, row[g[j]] - std::log(z), 1e-3);
    ASSERT_EQ(e.top.size(), 3u);
    EXPECT_EQ(e.top[0].token, g[j]);  // greedy: the best token
    for (const engine::TokenLogprob& t : e.top) EXPECT_NEAR(t.logprob, row[t.token] - std::log(z), 1e-3);
    EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
    EXPECT_GE(e.top[1].logprob, e.top[2].logprob);
  }
  testing::expect_clean(*se);
}

TEST(ServingFeatures, CacheSaltIsolatesPrefixHits) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  engine::CompletionRequest r = greedy(s->tokenizer->encode(testing::kStoryText, true, false), 2);
  r.cache_salt = "tenant-a";
  EXPECT_EQ(run_one(*se, r)->usage().cached_tokens, 0);
  r.cache_salt = "tenant-b";
  EXPECT_EQ(run_one(*se, r)->usage().cached_tokens, 0);
  r.cache_salt = "";
  EXPECT_EQ(run_one(*se, r)->usage().cached_tokens, 0);
  r.cache_salt = "tenant-a";
  const int64_t hit = run_one(*se, r)->usage().cached_tokens;
  EXPECT_EQ(hit, (static_cast<int64_t>(r.prompt.size()) - 1) / 16 * 16);
  EXPECT_EQ(se->metrics().prefix_hit_tokens, hit);
  EXPECT_EQ(se->metrics().prefix_queried_tokens, 4 * static_cast<int64_t>(r.prompt.size()));
  testing::expect_clean(*se);
}

TEST(ServingFeatures, BadRequestsAndConfigsAreRefused) {
  auto s = testing::load_stories();
  auto se = testing::serving(*s, {}, {});
  auto code = [&](engine::CompletionRequest r) { return se->submit(std::move(r), std::make_shared<Recorder>()).status().code(); };
  const std::vector<int32_t> p = {1, 100, 200};
  EXPECT_EQ(code(greedy({}, 4)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(greedy({1, 99999}, 4)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(greedy(p, 0)), StatusCode::kInvalidArgument);
  engine::CompletionRequest r = greedy(p, 4);
  r.n = 0;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = greedy(p, 4);
  r.logprobs = 21;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = greedy(p, 4);
  r.stop = {""};
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = greedy(p, 4);
  r.sampling.top_p = 0;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  EXPECT_EQ(se->submit(greedy(p, 4), nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(se->step());  // nothing was queued

  engine::EngineConfig windowed;
  windowed.num_threads = 1;
  windowed.max_context = 512;
  windowed.kv_window = 64;
  windowed.kv_cache_bytes = testing::pool_bytes(*s, 3);  // 48 tokens: not even one window
  auto e = engine::Engine::create(s->model, windowed, s->clock, s->logger);
  ASSERT_TRUE(e.is_ok());
  auto refused = engine::ServingEngine::create(std::move(e).value(), s->tokenizer, {});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("raise --kv-cache-mem"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

TEST(ServingMetrics, HistogramBucketsAreLessOrEqualBounds) {
  engine::Histogram h;
  h.observe(0.0);
  h.observe(0.001);   // == the first bound: first bucket ("le")
  h.observe(0.0011);
  h.observe(30.0);
  h.observe(31.0);    // above every bound: the last bucket
  EXPECT_EQ(h.buckets[0], 2);
  EXPECT_EQ(h.buckets[1], 1);
  EXPECT_EQ(h.buckets[engine::Histogram::kBounds.size() - 1], 1);
  EXPECT_EQ(h.buckets[engine::Histogram::kBounds.size()], 1);
  EXPECT_EQ(h.count, 5);
  EXPECT_DOUBLE_EQ(h.sum, 0.001 + 0.0011 + 61.0);
}

}  // namespace
}  // namespace pagoda
