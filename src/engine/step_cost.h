// StepCostModel: how long a forward step of n tokens (decode rows + prefill-chunk tokens) takes,
// so that the scheduler can size prefill chunks by a latency budget (SchedulerOptions::
// step_budget_ns, `--step-budget-ms`): a step that carries a long prefill chunk delays every
// decoding sequence's next token by the whole step, so while anybody decodes, a step takes at
// most as many tokens as fit the budget.
//
//   step time(n) = fixed_ns + per_token_ns * n
// fixed_ns is what every step pays (reading the weights once, the output layer, thread start);
// per_token_ns what each row adds (its share of the GEMMs, attention at its context, which the
// model does not separate). The line is an exponentially weighted least-squares fit over the
// observed steps (each new step weighs 1, the previous ones decay by kDecay), so it follows the
// load and the context lengths of the moment. Until steps with two different sizes were seen,
// the slope is the prior's (or the last fit's) and only the intercept follows the mean.
// Invariants: fixed_ns() >= 0, per_token_ns() > 0.
//
// Not thread-safe: the serving loop's thread owns it (observe after each step, the scheduler
// reads it in schedule()).
#pragma once

#include <cstdint>

namespace pagoda::engine {

class StepCostModel {
 public:
  static constexpr double kDecay = 0.9;  // weight of the previous steps at each new one
  // The prior: used until steps are observed. Preconditions: fixed_ns >= 0, per_token_ns > 0.
  StepCostModel(double fixed_ns, double per_token_ns);

  // One finished step: `tokens` rows in `ns` nanoseconds. Ignored unless tokens >= 1, ns >= 0.
  void observe(int64_t tokens, int64_t ns);

  double fixed_ns() const { return fixed_ns_; }
  double per_token_ns() const { return per_token_ns_; }
  double estimate_ns(int64_t tokens) const { return fixed_ns_ + per_token_ns_ * static_cast<double>(tokens); }
  // The most tokens whose estimated step time is <= budget_ns (0 when even the fixed cost is over).
  int64_t tokens_within(int64_t budget_ns) const;
  int64_t num_observed() const { return observed_; }

 private:
  void refit();

  double fixed_ns_, per_token_ns_;
  // Decayed sums over the observed steps: weight, x = tokens, y = ns.
  double sw_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  int64_t observed_ = 0;
};

}  // namespace pagoda::engine
