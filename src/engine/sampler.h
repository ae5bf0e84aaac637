// SamplingParams and Sampler: from a row of logits to the next token.
//
// Order of operations (as llama.cpp's default chain): repetition penalty over the last
// `repeat_last_n` tokens -> greedy if temperature <= 0 -> top-k -> top-p -> min-p ->
// temperature -> draw with the sequence's own Rng. Same seed, same logits -> same token.
#pragma once

#include <cstdint>
#include <span>
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

  // logits: [n_vocab], modified in place by the penalty. history: the tokens so far.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  SamplingParams params_;
  Rng rng_;
  std::vector<Candidate> candidates_;  // [n_vocab]
  std::vector<float> probs_;           // [n_vocab]
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
