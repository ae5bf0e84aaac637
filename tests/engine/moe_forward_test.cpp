// Mixture of experts (qwen3moe, deepseek2; model/moe.h): the routing rules against brute force,
// and the engine's logits against the float64 reference (reference_forward.h) on every ISA
// this CPU runs, one-token and 16-token chunks, 1 and 2 threads, f32 / f16 / q8_0 weights
// (DeepSeek's experts on MLA layers: mla_forward_test); files with broken expert keys are
// refused with the key named.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "kernels/matmul.h"
#include "model/model_factory.h"
#include "model/moe.h"
#include "reference_forward.h"

namespace pagoda {
namespace {

using reference::max_relative_error;
using reference::reference_logits;

TEST(MoeRouting, TopKBySoftmaxRenormalizedTiesToTheLowerId) {
  Rng rng(5);
  for (int64_t E : {4, 8, 64}) {
    for (int64_t k : {1, 2, 4}) {
      if (k > E) continue;
      const int64_t T = 7;
      std::vector<float> logits(T * E);
      for (auto& v : logits) v = static_cast<float>(std::round(rng.uniform(-3.0f, 3.0f) * 2) / 2);  // many ties
      std::vector<int32_t> ids(T * k);
      std::vector<float> w(T * k);
      std::vector<double> scratch(3 * E);
      model::route_tokens(logits.data(), T, E, k, model::ExpertRouting{}, nullptr, scratch.data(), ids.data(), w.data());
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> order(E);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[t * E + a] > logits[t * E + b]; });
        double z = 0;
        for (int64_t i = 0; i < k; ++i) z += std::exp(static_cast<double>(logits[t * E + order[i]]));
        double sum = 0;
        for (int64_t i = 0; i < k; ++i) {
          EXPECT_EQ(ids[t * k + i], order[i]) << "token " << t << " slot " << i;
          EXPECT_NEAR(w[t * k + i], std::exp(static_cast<double>(logits[t * E + order[i]])) / z, 1e-6);
          sum += w[t * k + i];
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);
      }
    }
  }
}

// DeepSeek's rules (sigmoid or softmax, a selection bias, groups, renormalization, scale)
// against the same choice made by brute force: every k-subset of the allowed experts, the one
// with the largest biased scores, lexicographically (ties to lower ids).
TEST(MoeRouting, DeepSeekRulesMatchBruteForce) {
  Rng rng(11);
  struct Rule {
    model::ExpertRouting routing;
    bool bias;
  };
  const std::vector<Rule> rules = {
      {{model::ExpertGating::kSoftmax, false, 1.0f, 1, 1}, false},  // DeepSeek-V2
      {{model::ExpertGating::kSigmoid, true, 2.5f, 4, 2}, true},    // DeepSeek-V3
      {{model::ExpertGating::kSigmoid, true, 1.0f, 1, 1}, true},    // Kimi K2-like: no groups
      {{model::ExpertGating::kSoftmax, true, 1.0f, 2, 1}, false},
  };
  const int64_t E = 8, T = 40;
  for (const Rule& rule : rules) {
    for (int64_t k : {1, 2, 3}) {
      if (rule.routing.n_groups_used * (E / rule.routing.n_groups) < k) continue;
      SCOPED_TRACE("groups " + std::to_string(rule.routing.n_groups) + " k " + std::to_string(k));
      std::vector<float> logits(T * E), bias(E);
      for (auto& v : logits) v = static_cast<float>(std::round(rng.uniform(-3.0f, 3.0f) * 4) / 4);
      for (auto& v : bias) v = rng.uniform(-0.2f, 0.2f);
      std::vector<int32_t> ids(T * k);
      std::vector<float> w(T * k);
      std::vector<double> scratch(3 * E);
      model::route_tokens(logits.data(), T, E, k, rule.routing, rule.bias ? bias.data() : nullptr, scratch.data(),
                          ids.data(), w.data());
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(E), sel(E);
        double z = 0;
        for (int64_t e = 0; e < E; ++e) z += std::exp(static_cast<double>(logits[t * E + e]));
        for (int64_t e = 0; e < E; ++e) {
          const double l = logits[t * E + e];
          p[e] = rule.routing.gating == model::ExpertGating::kSoftmax ? std::exp(l) / z : 1 / (1 + std::exp(-l));
          sel[e] = p[e] + (rule.bias ? bias[e] : 0.0f);
        }
        // Allowed experts: those of the n_groups_used groups with the largest top-2 sums.
        const int64_t G = rule.routing.n_groups, per = E / G;
        std::vector<bool> allowed(E, G == 1);
        if (G > 1) {
          std::vector<std::pair<double, int64_t>> groups;
          for (int64_t g = 0; g < G; ++g) {
            std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
            std::sort(v.rbegin(), v.rend());
            groups.push_back({-(v[0] + v[1]), g});
          }
          std::sort(groups.begin(), groups.end());
          for (int64_t i = 0; i < rule.routing.n_groups_used; ++i) {
            for (int64_t e = 0; e < per; ++e) allowed[groups[i].second * per + e] = true;
          }
        }
        // Brute force: the best k-subset by descending biased scores (ties: lower ids first).
        std::vector<int32_t> best;
        for (uint32_t mask = 0; mask < (1u << E); ++mask) {
          if (std::popcount(mask) != k) continue;
          std::vector<int32_t> pick;
          bool ok = true;
          for (int32_t e = 0; e < E; ++e) {
            if (mask >> e & 1) ok = ok && allowed[e], pick.push_back(e);
          }
          if (!ok) continue;
          std::stable_sort(pick.begin(), pick.end(), [&](int32_t a, int32_t b) { return sel[a] > sel[b]; });
          auto better = [&](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
            for (int64_t i = 0; i < k; ++i) {
              if (sel[a[i]] != sel[b[i]]) return sel[a[i]] > sel[b[i]];
              if (a[i] != b[i]) return a[i] < b[i];
            }
            return false;
          };
          if (best.empty() || better(pick, best)) best = pick;
        }
        double sum = 0;
        for (int32_t e : best) sum += p[e];
        for (int64_t i = 0; i < k; ++i) {
          EXPECT_EQ(ids[t * k + i], best[i]) << "token " << t << " slot " << i;
          const double want = p[best[i]] / (rule.routing.normalize ? sum : 1.0) * rule.routing.scale;
          EXPECT_NEAR(w[t * k + i], want, 1e-6 * std::max(1.0, want));
        }
      }
    }
  }
}

std::vector<int32_t> test_tokens(int64_t n_vocab, int n) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 37 + 5) % static_cast<int32_t>(n_vocab));
  return tokens;
}

TEST(MoeForward, EngineMatchesFloat64ForwardOnEveryIsa) {
  const model::ModelShape shape = model::find_model_shape("tiny-qwen3moe").value();
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto file = model::make_random_model(shape, dtype, 9);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const std::vector<int32_t> tokens = test_tokens(shape.n_vocab, 24);
    const std::vector<double> want = reference_logits(*file, shape, tokens);
    const bool quantized = dtype_info(dtype).block_elems > 1;
    const int64_t V = shape.n_vocab;
    for (kernels::Isa isa : kernels::supported_isas())
    for (int64_t batch : {1, 16})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " batch " + std::to_string(batch) + " threads " +
                   std::to_string(threads));
      auto model = model::LlamaModel::load(model::make_random_model(shape, dtype, 9).value());
      ASSERT_TRUE(model.is_ok()) << model.status().message();
      engine::EngineConfig config;
      config.num_threads = threads;
      config.max_batch_tokens = batch;
      config.block_size = 4;
      config.isa = isa;
      auto eng = engine::Engine::create(std::move(model).value(), config, clock, logger);
      ASSERT_TRUE(eng.is_ok()) << eng.status().message();
      auto got = eng.value()->score(tokens);
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      EXPECT_LT(max_relative_error(*got, want, V), quantized ? 5e-2 : 2e-4);
    }
  }
}

// Expert load (ForwardPass::expert_tokens, behind /metrics): every token fed counts once per
// expert it runs in every MoE layer, the leading dense layer counts nothing, and one token
// runs exactly k distinct experts per layer.
TEST(MoeForward, ExpertTokensCountEveryRoutedToken) {
  const model::ModelShape shape = model::find_model_shape("tiny-dsv3moe").value();
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  auto make = [&] {
    auto model = model::LlamaModel::load(model::make_random_model(shape, DType::kF32, 9).value());
    EXPECT_TRUE(model.is_ok()) << model.status().message();
    auto eng = engine::Engine::create(std::move(model).value(), engine::EngineConfig{}, clock, logger);
    EXPECT_TRUE(eng.is_ok()) << eng.status().message();
    return std::move(eng).value();
  };
  const int64_t E = shape.n_expert, k = shape.n_expert_used;
  auto eng = make();
  ASSERT_EQ(eng->expert_tokens().size(), static_cast<size_t>(shape.n_layer * E));
  ASSERT_TRUE(eng->score(test_tokens(shape.n_vocab, 13)).is_ok());
  for (int64_t l = 0; l < shape.n_layer; ++l) {
    int64_t routed = 0;
    for (int64_t e = 0; e < E; ++e) routed += eng->expert_tokens()[l * E + e];
    EXPECT_EQ(routed, l < shape.n_dense_lead ? 0 : 13 * k) << "layer " << l;
  }
  auto one = make();
  ASSERT_TRUE(one->score(test_tokens(shape.n_vocab, 1)).is_ok());
  for (int64_t l = shape.n_dense_lead; l < shape.n_layer; ++l) {
    int64_t experts = 0;
    for (int64_t e = 0; e < E; ++e) {
      EXPECT_LE(one->expert_tokens()[l * E + e], 1);
      experts += one->expert_tokens()[l * E + e];
    }
    EXPECT_EQ(experts, k) << "layer " << l;
  }
  auto dense = model::LlamaModel::load(model::make_random_model(model::find_model_shape("tiny").value(), DType::kF32, 9).value());
  ASSERT_TRUE(dense.is_ok());
  auto dense_eng = engine::Engine::create(std::move(dense).value(), engine::EngineConfig{}, clock, logger);
  ASSERT_TRUE(dense_eng.is_ok());
  EXPECT_TRUE(dense_eng.value()->expert_tokens().empty());
}

TEST(MoeForward, BrokenExpertKeysAreRefused) {
  const model::ModelShape shape = model::find_model_shape("tiny-qwen3moe").value();
  struct Case {
    const char* key;
    model::GgufValue value;
    const char* word;
  };
  const std::vector<Case> cases = {
      {"qwen3moe.expert_used_count", model::GgufValue::of_u32(9), "8 experts, 9 used"},
      {"qwen3moe.expert_count", model::GgufValue::of_u32(0), "experts"},
      {"qwen3moe.expert_gating_func", model::GgufValue::of_u32(2), "expert_gating_func"},
  };
  for (const Case& c : cases) {
    auto file = model::make_random_model(shape, DType::kF32, 9);
    ASSERT_TRUE(file.is_ok());
    file->set(c.key, c.value);
    auto model = model::LlamaModel::load(std::move(file).value());
    ASSERT_FALSE(model.is_ok()) << c.key;
    EXPECT_NE(model.status().message().find(c.word), std::string::npos) << model.status().message();
  }
  auto file = model::make_random_model(shape, DType::kF32, 9);
  ASSERT_TRUE(file.is_ok());
  file->erase("qwen3moe.expert_count");
  auto model = model::LlamaModel::load(std::move(file).value());
  ASSERT_FALSE(model.is_ok());
  EXPECT_NE(model.status().message().find("expert_count"), std::string::npos) << model.status().message();
}

}  // namespace
}  // namespace pagoda
