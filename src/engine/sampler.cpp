#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace pagoda::engine {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) return Status::error("temperature must be in [0, 100]");
  if (!(top_p > 0.0f) || top_p > 1.0f) return Status::error("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f) || min_p > 1.0f) return Status::error("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f)) return Status::error("repetition_penalty must be > 0");
  if (repeat_last_n < 0) return Status::error("repeat_last_n must be >= 0");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return Status::error("presence_penalty must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) return Status::error("frequency_penalty must be in [-2, 2]");
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto& [id, bias] = logit_bias[i];
    if (id < 0) return Status::error("logit_bias: token ids must be >= 0");
    if (i > 0 && logit_bias[i - 1].first >= id) return Status::error("logit_bias: ids must ascend, each once");
    if (!(bias >= -100.0f && bias <= 100.0f)) return Status::error("logit_bias: values must be in [-100, 100]");
  }
  return Status::ok();
}

int32_t argmax(std::span<const float> values) {
  CHECK(!values.empty());
  // The first index whose value no later one exceeds, starting from index 0 (a NaN at 0 is
  // kept; later NaNs never win). kLanes interleaved running maxima, each keeping its first
  // index, so no compare waits on the previous one (one chain over 32,000 logits was ~3% of a
  // 16-sequence decode step, serial on the step thread).
  if (std::isnan(values[0])) return 0;
  constexpr size_t kLanes = 8;
  float best[kLanes];
  int64_t at[kLanes];
  for (size_t j = 0; j < kLanes; ++j) best[j] = -INFINITY, at[j] = -1;
  const size_t n = values.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const bool more = values[i + j] > best[j];
      best[j] = more ? values[i + j] : best[j];
      at[j] = more ? static_cast<int64_t>(i + j) : at[j];
    }
  }
  for (; i < n; ++i) {
    const size_t j = i % kLanes;
    if (values[i] > best[j]) best[j] = values[i], at[j] = static_cast<int64_t>(i);
  }
  int64_t result = 0;  // every value NaN or -inf past index 0: index 0, as no value exceeds it
  float top = values[0];
  for (size_t j = 0; j < kLanes; ++j) {
    if (at[j] < 0) continue;
    if (best[j] > top || (best[j] == top && at[j] < result)) top = best[j], result = at[j];
  }
  return static_cast<int32_t>(result);
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params), rng_(params.seed), candidates_(n_vocab), probs_(n_vocab),
      counts_(params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f ? n_vocab : 0, 0.0f) {}

void Sampler::apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> generated) {
  const int64_t n = static_cast<int64_t>(logits.size());
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < n) logits[id] += bias;
  }
  if ((params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f) || generated.empty()) return;
  // counts_ (all zero between calls) counts each token's occurrences; each distinct token is
  // penalised once, when its count is first seen complete, and its counter zeroed again.
  for (int32_t id : generated) {
    if (id >= 0 && id < n) counts_[id] += 1.0f;
  }
  for (int32_t id : generated) {
    if (id < 0 || id >= n || counts_[id] == 0.0f) continue;
    logits[id] -= params_.frequency_penalty * counts_[id] + params_.presence_penalty;
    counts_[id] = 0.0f;
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history, std::span<const int32_t> generated) {
  const int64_t n = static_cast<int64_t>(logits.size());
  CHECK_EQ(n, static_cast<int64_t>(candidates_.size()));
  apply_bias_and_penalties(logits, generated);
  if (params_.repetition_penalty != 1.0f && params_.repeat_last_n > 0) {
    const size_t start = history.size() > static_cast<size_t>(params_.repeat_last_n)
                             ? history.size() - params_.repeat_last_n
                             : 0;
    // Penalise each distinct recent token once (mark by sign flip of a scratch flag).
    std::fill(probs_.begin(), probs_.end(), 0.0f);
    for (size_t i = start; i < history.size(); ++i) {
      const int32_t id = history[i];
      if (id < 0 || id >= n || probs_[id] != 0.0f) continue;
      probs_[id] = 1.0f;
      logits[id] = logits[id] > 0 ? logits[id] / params_.repetition_penalty : logits[id] * params_.repetition_penalty;
    }
  }
  if (params_.temperature <= 0.0f) return argmax(logits);
  if (!(params_.top_k > 0 && params_.top_k < n) && params_.top_p >= 1.0f) return sample_unsorted(logits);

  for (int64_t i = 0; i < n; ++i) candidates_[i] = {static_cast<int32_t>(i), logits[i]};
  int64_t size = n;
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (params_.top_k > 0 && params_.top_k < size) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.begin() + size, by_logit);
    size = params_.top_k;
  } else {
    std::sort(candidates_.begin(), candidates_.begin() + size, by_logit);
  }
  // Softmax at temperature 1 for the top-p / min-p cut-offs.
  const float max_logit = candidates_[0].logit;
  double sum = 0.0;
  for (int64_t i = 0; i < size; ++i) sum += (probs_[i] = std::exp(candidates_[i].logit - max_logit));
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    for (int64_t i = 0; i < size; ++i) {
      cum += probs_[i] / sum;
      if (cum >= params_.top_p) {
        size = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * probs_[0];
    int64_t keep = 1;
    while (keep < size && probs_[keep] >= threshold) ++keep;
    size = keep;
  }
  // Temperature, then draw.
  double total = 0.0;
  for (int64_t i = 0; i < size; ++i) {
    probs_[i] = std::exp((candidates_[i].logit - max_logit) / params_.temperature);
    total += probs_[i];
  }
  const double r = rng_.uniform() * total;
  double cum = 0.0;
  for (int64_t i = 0; i < size; ++i) {
    cum += probs_[i];
    if (r < cum) return candidates_[i].id;
  }
  return candidates_[size - 1].id;
}

// No top-k or top-p cut (OpenAI's defaults): no order is needed, so no sort of the vocabulary
// (a 32,000-entry sort per token was most of a batched decode step's sampling). min-p keeps
// the tokens with p >= min_p * p_max, i.e. logit >= max + log(min_p); the draw walks ids in order.
int32_t Sampler::sample_unsorted(std::span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const int32_t best = argmax(logits);
  const float max_logit = logits[static_cast<size_t>(best)];
  const float floor = params_.min_p > 0.0f ? max_logit + std::log(params_.min_p) : -INFINITY;
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float l = logits[static_cast<size_t>(i)];
    probs_[i] = l >= floor && l > -INFINITY ? static_cast<float>(std::exp((l - max_logit) / params_.temperature)) : 0.0f;
    total += probs_[i];
  }
  const double r = rng_.uniform() * total;
  double cum = 0.0;
  int32_t last = best;
  for (int64_t i = 0; i < n; ++i) {
    if (probs_[i] == 0.0f) continue;
    cum += probs_[i];
    last = static_cast<int32_t>(i);
    if (r < cum) return last;
  }
  return last;
}

void log_softmax_top(std::span<const float> logits, int32_t chosen, int k, std::vector<int32_t>& index_scratch,
                     TokenLogprobs& out) {
  const int64_t n = static_cast<int64_t>(logits.size());
  CHECK(chosen >= 0 && chosen < n && k >= 0);
  const float max_logit = logits[argmax(logits)];
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  const double log_z = max_logit + std::log(sum);
  out.chosen = static_cast<float>(logits[chosen] - log_z);
  const int64_t top = std::min<int64_t>(k, n);
  index_scratch.resize(n);
  for (int64_t i = 0; i < n; ++i) index_scratch[i] = static_cast<int32_t>(i);
  std::partial_sort(index_scratch.begin(), index_scratch.begin() + top, index_scratch.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top_ids.assign(index_scratch.begin(), index_scratch.begin() + top);
  out.top_logprobs.resize(top);
  for (int64_t i = 0; i < top; ++i) out.top_logprobs[i] = static_cast<float>(logits[out.top_ids[i]] - log_z);
}

}  // namespace pagoda::engine
