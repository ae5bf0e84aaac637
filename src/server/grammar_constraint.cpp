#include "server/grammar_constraint.h"

#include <algorithm>
#include <cmath>

namespace pagoda::server {

GrammarConstraint::GrammarConstraint(std::shared_ptr<structured::CompiledGrammar> grammar, std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), end_ids_(std::move(end_ids)), state_(grammar_->initial()) {}

void GrammarConstraint::mask(std::span<float> logits) {
  const std::shared_ptr<const std::vector<uint64_t>> bits = grammar_->mask(state_);
  const int64_t n = static_cast<int64_t>(logits.size());
  const bool complete = structured::accepting(state_);
  // End tokens: their bytes are "" (never in a mask); allowed exactly where the grammar is
  // complete, with the model's own logit (read before masking).
  float end_logits[8];
  const size_t num_end = std::min<size_t>(end_ids_.size(), 8);
  for (size_t i = 0; i < num_end; ++i) {
    const int32_t id = end_ids_[i];
    end_logits[i] = id >= 0 && id < n ? logits[static_cast<size_t>(id)] : -INFINITY;
  }
  const int64_t known = std::min<int64_t>(n, grammar_->index().n_vocab());
  bool any = false;
  for (int64_t w = 0; w * 64 < known; ++w) {
    const uint64_t word = (*bits)[static_cast<size_t>(w)];
    any = any || word != 0;
    const int64_t end = std::min<int64_t>(known, (w + 1) * 64);
    if (word == ~uint64_t{0} && end - w * 64 == 64) continue;
    for (int64_t t = w * 64; t < end; ++t) {
      if (((word >> (t - w * 64)) & 1) == 0) logits[static_cast<size_t>(t)] = -INFINITY;
    }
  }
  for (int64_t t = known; t < n; ++t) logits[static_cast<size_t>(t)] = -INFINITY;  // padding rows
  for (size_t i = 0; i < num_end; ++i) {
    const int32_t id = end_ids_[i];
    if (id >= 0 && id < n) logits[static_cast<size_t>(id)] = complete ? end_logits[i] : -INFINITY;
  }
  dead_ = !any && !complete;
}

void GrammarConstraint::accept(int32_t token) {
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) return;
  if (token < 0 || token >= grammar_->index().n_vocab() ||
      !structured::advance_text(grammar_->grammar(), state_, grammar_->index().piece(token))) {
    dead_ = true;  // a token the mask did not allow: only a caller that ignored the mask gets here
  }
}

bool GrammarConstraint::finished() const {
  return structured::accepting(state_) && !structured::can_continue(state_);
}

std::unique_ptr<engine::TokenConstraint> GrammarConstraint::clone() const {
  return std::make_unique<GrammarConstraint>(*this);
}

}  // namespace pagoda::server
