// TokenConstraint: the seam through which constrained decoding (structured outputs) reaches the
// sampler. The engine knows nothing of grammars: a request carries a prototype, each choice
// clones it, and before each sample of that choice the constraint forbids tokens; after it,
// the sampled token is accepted.
//
//   mask(logits)    set the logits of forbidden tokens to -inf (ending the reply, e.g. EOS, is
//                   allowed only where the constraint is complete)
//   accept(token)   the choice took `token` (always one mask allowed)
//   finished()      complete and nothing may follow: the engine ends the choice (kStop)
//   dead()          nothing is allowed (cannot happen for a consistent constraint): the engine
//                   ends the choice rather than sample from nothing
//
// Called on the step thread only; a clone is independent of its original (forks, n > 1).
// Preemption keeps each choice's constraint as it keeps its sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace pagoda::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual void mask(std::span<float> logits) = 0;
  virtual void accept(int32_t token) = 0;
  virtual bool finished() const = 0;
  virtual bool dead() const = 0;
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
};

}  // namespace pagoda::engine
