// StepCostModel: the model is at the top of engine/step_cost.h.
#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace pagoda::engine {

namespace {
constexpr double kMinVariance = 1.0;  // token^2: below it, the sizes say nothing about the slope
constexpr double kMinPerTokenNs = 1.0;
}  // namespace

StepCostModel::StepCostModel(double fixed_ns, double per_token_ns) : fixed_ns_(fixed_ns), per_token_ns_(per_token_ns) {
  CHECK(fixed_ns >= 0 && per_token_ns > 0) << "step cost prior " << fixed_ns << " + " << per_token_ns << " ns/token";
}

void StepCostModel::observe(int64_t tokens, int64_t ns) {
  if (tokens < 1 || ns < 0) return;
  const double x = static_cast<double>(tokens), y = static_cast<double>(ns);
  sw_ = sw_ * kDecay + 1;
  sx_ = sx_ * kDecay + x;
  sy_ = sy_ * kDecay + y;
  sxx_ = sxx_ * kDecay + x * x;
  sxy_ = sxy_ * kDecay + x * y;
  ++observed_;
  refit();
}

void StepCostModel::refit() {
  const double mx = sx_ / sw_, my = sy_ / sw_;
  const double var = sxx_ / sw_ - mx * mx;
  if (var >= kMinVariance) per_token_ns_ = std::max(kMinPerTokenNs, (sxy_ / sw_ - mx * my) / var);
  fixed_ns_ = my - per_token_ns_ * mx;
  if (fixed_ns_ < 0) {  // the line through the origin and the mean instead
    fixed_ns_ = 0;
    per_token_ns_ = std::max(kMinPerTokenNs, my / mx);
  }
}

int64_t StepCostModel::tokens_within(int64_t budget_ns) const {
  const double room = static_cast<double>(budget_ns) - fixed_ns_;
  if (room < 0) return 0;
  const double n = std::floor(room / per_token_ns_);
  return n >= static_cast<double>(std::numeric_limits<int32_t>::max()) ? std::numeric_limits<int32_t>::max()
                                                                        : static_cast<int64_t>(n);
}

}  // namespace pagoda::engine
