// SamplingParams and Sampler: from a row of logits to the next token.
//
// Order of operations: logit_bias (added to the named tokens' logits) -> presence and
// frequency penalties over the tokens generated so far (OpenAI's definition:
//   logit[t] -= frequency_penalty * count(t) + presence_penalty * (count(t) > 0),
// count over the completion only, never the prompt, as vLLM and OpenAI count) -> repetition
// penalty over the last `repeat_last_n` tokens of prompt and completion (as llama.cpp's
// default chain) -> greedy if temperature <= 0 -> top-k -> top-p -> min-p -> temperature ->
// draw with the sequence's own Rng. Same seed, same logits -> same token. Without a top-k or
// top-p cut the draw needs no order: it walks the vocabulary by id, unsorted.
// Reported logprobs (log_softmax_top) are the model's own distribution: before bias,
// penalties, truncation and temperature (vLLM's default, "raw" logprobs).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace pagoda::engine {

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy (argmax)
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f; // 1: off; > 1 discourages repeats (CTRL-style)
  int32_t repeat_last_n = 64;
  float presence_penalty = 0.0f;   // [-2, 2]; 0: off
  float frequency_penalty = 0.0f;  // [-2, 2]; 0: off
  // [(token id, bias)] ascending by id, each id once, bias in [-100, 100]; empty: off. Set at
  // request creation (never in the step loop).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  Status validate() const;
};

class Sampler {
 public:
  // Candidates scratch is sized for n_vocab once.
  Sampler(const SamplingParams& params, int64_t n_vocab);

  // logits: [n_vocab], modified in place by bias and penalties. history: the tokens so far
  // (prompt and completion); generated: the completion's tokens (its tail, usually).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history,
                 std::span<const int32_t> generated = {});
  // Bias and presence/frequency penalties only (sample's first two steps), for callers that
  // pick the token themselves. Leaves the counting scratch zeroed.
  void apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> generated);

  const SamplingParams& params() const { return params_; }

 private:
  int32_t sample_unsorted(std::span<const float> logits);
  struct Candidate {
    int32_t id;
    float logit;
  };
  SamplingParams params_;
  Rng rng_;
  std::vector<Candidate> candidates_;  // [n_vocab]
  std::vector<float> probs_;           // [n_vocab]
  std::vector<float> counts_;          // [n_vocab] with penalties (else empty): completion token
                                       // counts, all zero between calls
};

// Index of the largest value (lowest index on ties).
int32_t argmax(std::span<const float> values);

// Log-softmax of raw logits [n_vocab]: the log-probability of `chosen`, and the k most likely
// tokens best first (ties: lower id) into top_ids/top_logprobs (resized to k). index_scratch is
// [n_vocab] (resized once).
struct TokenLogprobs {
  float chosen = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};
void log_softmax_top(std::span<const float> logits, int32_t chosen, int k, std::vector<int32_t>& index_scratch,
                     TokenLogprobs& out);

}  // namespace pagoda::engine
