// GrammarConstraint: the engine's TokenConstraint (engine/token_constraint.h) over a compiled
// grammar (structured/token_index.h): a choice's match state, advanced by each sampled token's
// bytes; its mask is the grammar's cached mask of that state, plus the end tokens (EOS, the end
// of turn) only where the grammar is complete.
//
// GrammarCache: compiled grammars by their source text (a schema's JSON), so requests with the
// same schema share one grammar and its mask cache. At most `capacity` grammars, least
// recently used dropped first. Thread-safe.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/token_constraint.h"
#include "structured/token_index.h"

namespace pagoda::server {

class GrammarConstraint final : public engine::TokenConstraint {
 public:
  // end_ids: at most 8 tokens that end a reply (EOS, end of turn); more are ignored.
  GrammarConstraint(std::shared_ptr<structured::CompiledGrammar> grammar, std::vector<int32_t> end_ids);

  void mask(std::span<float> logits) override;
  void accept(int32_t token) override;
  bool finished() const override;
  bool dead() const override { return dead_; }
  std::unique_ptr<engine::TokenConstraint> clone() const override;

  const structured::MatchState& state() const { return state_; }

 private:
  std::shared_ptr<structured::CompiledGrammar> grammar_;
  std::vector<int32_t> end_ids_;
  structured::MatchState state_;
  bool dead_ = false;
};

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity) : capacity_(capacity) {}
  // The grammar compiled from `key` by `compile` (called only on a miss, outside the lock).
  template <typename Compile>
  Result<std::shared_ptr<structured::CompiledGrammar>> get(const std::string& key, Compile compile);
  size_t size() const;

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<structured::CompiledGrammar>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

template <typename Compile>
Result<std::shared_ptr<structured::CompiledGrammar>> GrammarCache::get(const std::string& key, Compile compile) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  Result<std::shared_ptr<structured::CompiledGrammar>> made = compile();
  if (!made.is_ok()) return made;
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;  // compiled twice: keep one
  lru_.emplace_front(key, *made);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return made;
}

}  // namespace pagoda::server
