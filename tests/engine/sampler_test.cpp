#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace pagoda::engine {
namespace {

std::vector<float> logits_fixture() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f}; }

TEST(Sampler, GreedyPicksArgmax) {
  Sampler s(SamplingParams::greedy(), 6);
  auto l = logits_fixture();
  EXPECT_EQ(s.sample(l, {}), 1);
}

// argmax against the plain loop it replaces: the first index no later value exceeds, from
// index 0 (a NaN there is kept, later NaNs never win), over ties, infinities, NaNs and every
// length's tail.
TEST(Sampler, ArgmaxIsThePlainLoops) {
  auto plain = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      if (v[i] > v[best]) best = static_cast<int32_t>(i);
    }
    return best;
  };
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  const float specials[] = {INFINITY, -INFINITY, std::nanf(""), 0.0f, -0.0f, 2.0f};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<float> v(1 + next() % 70);
    for (float& x : v) {
      const uint32_t r = next() % 10;
      x = r < 6 ? static_cast<float>(next() % 5) : r < 9 ? specials[next() % 6] : static_cast<float>(next() % 1000) / 7.0f;
    }
    ASSERT_EQ(argmax(v), plain(v)) << "trial " << trial << " size " << v.size();
  }
  std::vector<float> big(32000);
  for (float& x : big) x = static_cast<float>(next() % 100000) / 3.0f;
  EXPECT_EQ(argmax(big), plain(big));
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p, 6);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      auto l = logits_fixture();
      out.push_back(s.sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, TopKTopPMinPRestrictTheCandidates) {
  auto histogram = [](SamplingParams p) {
    p.temperature = 1.0f;
    Sampler s(p, 6);
    std::map<int32_t, int> h;
    for (int i = 0; i < 2000; ++i) {
      auto l = logits_fixture();
      ++h[s.sample(l, {})];
    }
    return h;
  };
  SamplingParams k;
  k.top_k = 2;
  k.top_p = 1.0f;
  k.min_p = 0.0f;
  auto hk = histogram(k);
  for (auto [id, n] : hk) EXPECT_TRUE(id == 1 || id == 5) << id;
  SamplingParams tp;
  tp.top_k = 0;
  tp.top_p = 0.5f;
  tp.min_p = 0.0f;
  auto hp = histogram(tp);  // p(1) ~ 0.37, p(5) ~ 0.34: the top two cover 0.5
  for (auto [id, n] : hp) EXPECT_TRUE(id == 1 || id == 5) << id;
  SamplingParams mp;
  mp.top_k = 0;
  mp.top_p = 1.0f;
  mp.min_p = 0.5f;  // keeps p >= 0.5 p_max: ids 1, 5, 2
  auto hm = histogram(mp);
  for (auto [id, n] : hm) EXPECT_TRUE(id == 1 || id == 5 || id == 2) << id;
  EXPECT_EQ(hm.size(), 3u);
}

TEST(Sampler, RepetitionPenaltyDiscouragesRecentTokens) {
  SamplingParams p = SamplingParams::greedy();
  p.repetition_penalty = 2.0f;
  Sampler s(p, 6);
  auto l = logits_fixture();
  const std::vector<int32_t> history = {1, 1};
  EXPECT_EQ(s.sample(l, history), 5);  // 3.0 / 2 = 1.5 < 2.9
  EXPECT_FLOAT_EQ(l[1], 1.5f);         // penalised once, not per occurrence
}

TEST(Sampler, ValidatesParameters) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_FALSE(p.validate().is_ok());
  p = SamplingParams();
  p.temperature = -1.0f;
  EXPECT_FALSE(p.validate().is_ok());
  EXPECT_TRUE(SamplingParams().validate().is_ok());
}

}  // namespace
}  // namespace pagoda::engine

namespace pagoda::engine {
namespace {

// logit_bias and OpenAI's presence/frequency penalties against their definition, computed
// plainly, on random logits and completions (ids out of range are ignored), twice per sampler
// so the counting scratch is shown to be left clean.
TEST(Sampler, BiasAndPenaltiesAreOpenAisDefinition) {
  uint64_t state = 99;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  constexpr int64_t kVocab = 50;
  for (int trial = 0; trial < 200; ++trial) {
    SamplingParams p = SamplingParams::greedy();
    p.presence_penalty = static_cast<float>(next() % 9) * 0.5f - 2.0f;
    p.frequency_penalty = static_cast<float>(next() % 9) * 0.5f - 2.0f;
    for (int32_t id = 0; id < kVocab; ++id) {
      if (next() % 5 == 0) p.logit_bias.emplace_back(id, static_cast<float>(next() % 201) - 100.0f);
    }
    ASSERT_TRUE(p.validate().is_ok());
    Sampler s(p, kVocab);
    std::vector<int32_t> generated(next() % 30);
    for (int32_t& t : generated) t = static_cast<int32_t>(next() % (kVocab + 5)) - 2;  // a few out of range
    std::vector<float> logits(kVocab);
    for (float& x : logits) x = static_cast<float>(next() % 1000) / 100.0f - 5.0f;
    std::vector<double> want(logits.begin(), logits.end());
    for (const auto& [id, bias] : p.logit_bias) want[id] += bias;
    std::map<int32_t, int> count;
    for (int32_t t : generated) {
      if (t >= 0 && t < kVocab) ++count[t];
    }
    for (const auto& [id, c] : count) want[id] -= p.frequency_penalty * c + p.presence_penalty;
    for (int round = 0; round < 2; ++round) {
      std::vector<float> got = logits;
      s.apply_bias_and_penalties(got, generated);
      for (int64_t i = 0; i < kVocab; ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "trial " << trial << " token " << i;
    }
  }
}

TEST(Sampler, LogitBiasSteersGreedyAndForbids) {
  SamplingParams p = SamplingParams::greedy();
  p.logit_bias = {{0, 100.0f}, {1, -100.0f}};
  Sampler s(p, 6);
  auto l = logits_fixture();  // argmax 1 without bias
  EXPECT_EQ(s.sample(l, {}), 0);
  // At temperature 1 a -100 bias is a ban in practice: token 1 never drawn in 2,000 draws.
  SamplingParams q;
  q.temperature = 1.0f, q.top_k = 0, q.top_p = 1.0f, q.min_p = 0.0f;
  q.logit_bias = {{1, -100.0f}};
  Sampler t(q, 6);
  for (int i = 0; i < 2000; ++i) {
    auto m = logits_fixture();
    ASSERT_NE(t.sample(m, {}), 1);
  }
}

TEST(Sampler, FrequencyPenaltyCountsTheCompletionOnly) {
  SamplingParams p = SamplingParams::greedy();
  p.frequency_penalty = 1.0f;
  Sampler s(p, 6);
  const std::vector<int32_t> history = {1, 1, 1, 1, 2};  // prompt 1, 1, 1 then generated 1, 2
  auto l = logits_fixture();                            // 3.0 at 1, 2.9 at 5, 2.5 at 2
  // Only the completion {1, 2} counts: token 1 drops to 2.0, so 5 wins.
  EXPECT_EQ(s.sample(l, history, std::span<const int32_t>(history).last(2)), 5);
  SamplingParams bad = SamplingParams::greedy();
  bad.logit_bias = {{3, 1.0f}, {2, 1.0f}};
  EXPECT_FALSE(bad.validate().is_ok());  // ids must ascend
  bad.logit_bias = {{2, 100.5f}};
  EXPECT_FALSE(bad.validate().is_ok());
  bad.logit_bias.clear();
  bad.presence_penalty = -2.5f;
  EXPECT_FALSE(bad.validate().is_ok());
}

}  // namespace
}  // namespace pagoda::engine

namespace pagoda::engine {
namespace {

// Without top-k / top-p the draw skips the sort: frequencies follow softmax(logits / T), min-p
// drops what it must, and -inf (a constrained-decoding mask) is never drawn.
TEST(Sampler, UnsortedDrawFollowsTheDistribution) {
  const std::vector<float> base = {1.0f, 3.0f, 2.5f, -INFINITY, 0.5f, 2.9f};
  for (float t : {1.0f, 0.7f}) {
    SamplingParams p;
    p.temperature = t, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 3;
    Sampler s(p, 6);
    std::vector<int> count(6, 0);
    const int draws = 40000;
    for (int i = 0; i < draws; ++i) {
      auto l = base;
      ++count[static_cast<size_t>(s.sample(l, {}))];
    }
    double z = 0;
    for (float x : base) z += std::exp(static_cast<double>(x) / t);
    for (size_t i = 0; i < 6; ++i) {
      const double want = std::exp(static_cast<double>(base[i]) / t) / z;
      EXPECT_NEAR(static_cast<double>(count[i]) / draws, want, 0.01) << "token " << i << " at T " << t;
    }
    EXPECT_EQ(count[3], 0);
  }
  SamplingParams m;
  m.temperature = 1.0f, m.top_k = 0, m.top_p = 1.0f, m.min_p = 0.5f;  // keeps p >= 0.5 p_max: ids 1, 2, 5
  Sampler s(m, 6);
  for (int i = 0; i < 3000; ++i) {
    auto l = base;
    const int32_t id = s.sample(l, {});
    ASSERT_TRUE(id == 1 || id == 2 || id == 5) << id;
  }
}

}  // namespace
}  // namespace pagoda::engine
