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
