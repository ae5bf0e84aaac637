#include "structured/token_index.h"

#include <algorithm>
#include <chrono>

namespace pagoda::structured {

TokenIndex::TokenIndex(const std::vector<std::string>& pieces)
    : n_vocab_(static_cast<int32_t>(pieces.size())), pieces_(pieces) {
  nodes_.emplace_back();
  for (int32_t id = 0; id < n_vocab_; ++id) {
    const std::string& p = pieces_[static_cast<size_t>(id)];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : p) {
      auto& ch = nodes_[static_cast<size_t>(node)].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(static_cast<uint8_t>(c), int32_t{-1}));
      if (it != ch.end() && it->first == c) {
        node = it->second;
      } else {
        const int32_t next = static_cast<int32_t>(nodes_.size());
        ch.insert(it, {static_cast<uint8_t>(c), next});
        nodes_.emplace_back();  // may move `ch`'s owner: not used after this
        node = next;
      }
    }
    nodes_[static_cast<size_t>(node)].tokens.push_back(id);
  }
}

size_t CompiledGrammar::KeyHash::operator()(const std::vector<int32_t>& k) const {
  uint64_t h = 1469598103934665603ull;
  for (int32_t v : k) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenIndex> index)
    : grammar_(std::move(grammar)), index_(std::move(index)), initial_(initial_state(grammar_)) {}

int32_t CompiledGrammar::intern(const MatchState& s) {
  state_key(s, key_);
  if (auto it = state_ids_.find(key_); it != state_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(states_.size());
  states_.push_back(s);
  std::array<int32_t, 256> unknown;
  unknown.fill(-2);
  transitions_.push_back(unknown);
  continues_.push_back(can_continue(s) ? 1 : 0);
  masks_.emplace_back();
  state_ids_.emplace(key_, id);
  return id;
}

int32_t CompiledGrammar::step(int32_t state, uint8_t byte) {
  int32_t& t = transitions_[static_cast<size_t>(state)][byte];
  if (t != -2) return t;
  advance(grammar_, states_[static_cast<size_t>(state)], byte, next_);
  const int32_t to = next_.empty() ? -1 : intern(next_);
  transitions_[static_cast<size_t>(state)][byte] = to;  // (intern may have moved `t`'s row)
  return to;
}

void CompiledGrammar::walk(int32_t node, int32_t state, std::vector<uint64_t>& bits) {
  const auto& nodes = index_->nodes();
  for (const auto& [byte, child] : nodes[static_cast<size_t>(node)].children) {
    const int32_t next = step(state, byte);
    if (next < 0) continue;
    for (int32_t t : nodes[static_cast<size_t>(child)].tokens) bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    if (!nodes[static_cast<size_t>(child)].children.empty() && continues_[static_cast<size_t>(next)] != 0) walk(child, next, bits);
  }
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::mask(const MatchState& s) {
  std::lock_guard lock(mutex_);
  if (states_.size() >= kMaxStates) {
    states_.clear();
    state_ids_.clear();
    transitions_.clear();
    continues_.clear();
    masks_.clear();
  }
  const int32_t id = intern(s);
  if (masks_[static_cast<size_t>(id)]) {
    ++stats_.mask_hits;
    return masks_[static_cast<size_t>(id)];
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto bits = std::make_shared<std::vector<uint64_t>>((static_cast<size_t>(index_->n_vocab()) + 63) / 64, 0);
  walk(0, id, *bits);
  stats_.mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.mask_misses;
  masks_[static_cast<size_t>(id)] = bits;  // (the walk may have interned more states: index again)
  return bits;
}

GrammarStats CompiledGrammar::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace pagoda::structured
