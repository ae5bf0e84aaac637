// TokenIndex: a tokenizer's vocabulary as bytes in a trie (built once per model), and
// CompiledGrammar: a Grammar with the token masks of its states, computed by walking the trie
// from a state (a branch is cut at the first byte the grammar refuses) and kept per state.
//
// The walk runs over a lazily built automaton: match states are interned as ids and each
// (state, byte) transition is computed once (the matcher's advance) and then looked up, so a
// state that allows most of the vocabulary (inside a string) costs one table lookup per trie
// node. Each interned state keeps its mask once computed. At most kMaxStates states are kept;
// past that the automaton (masks included) starts over.
//
// A mask is a bitset over token ids: bit t set = every byte of token t is accepted from the
// state. Tokens with no bytes (control tokens, rendered as "") are never allowed by a mask;
// ending the reply is the caller's decision (accepting(state)).
//
// Thread-safety: TokenIndex is immutable. CompiledGrammar::mask may be called from any thread
// (a mutex guards its automaton); the engine calls it from the step thread only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace pagoda::structured {

class TokenIndex {
 public:
  // pieces: [n_vocab] each token's bytes as the detokenizer writes them ("" = never allowed).
  explicit TokenIndex(const std::vector<std::string>& pieces);

  int32_t n_vocab() const { return n_vocab_; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), ascending bytes
    std::vector<int32_t> tokens;                         // tokens whose bytes end here
  };
  const std::vector<Node>& nodes() const { return nodes_; }

 private:
  int32_t n_vocab_ = 0;
  std::vector<std::string> pieces_;  // [n_vocab]
  std::vector<Node> nodes_;          // nodes_[0]: the root (empty prefix)
};

struct GrammarStats {
  int64_t mask_hits = 0;     // masks served from the cache
  int64_t mask_misses = 0;   // masks computed by a trie walk
  double mask_seconds = 0;   // time in trie walks
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenIndex> index);

  const Grammar& grammar() const { return grammar_; }
  const TokenIndex& index() const { return *index_; }
  const MatchState& initial() const { return initial_; }
  // The mask of state s: [ceil(n_vocab / 64)] words. The pointer stays valid while held.
  std::shared_ptr<const std::vector<uint64_t>> mask(const MatchState& s);
  GrammarStats stats() const;

 private:
  struct KeyHash {
    size_t operator()(const std::vector<int32_t>& k) const;
  };
  static constexpr size_t kMaxStates = 20000;  // interned states (256 transitions of 4 bytes each)
  int32_t intern(const MatchState& s);         // under mutex_
  int32_t step(int32_t state, uint8_t byte);   // -1: dead; under mutex_
  void walk(int32_t node, int32_t state, std::vector<uint64_t>& bits);

  Grammar grammar_;
  std::shared_ptr<const TokenIndex> index_;
  MatchState initial_;
  mutable std::mutex mutex_;
  std::vector<int32_t> key_;         // scratch of intern
  std::vector<MatchState> states_;   // [state id]
  std::vector<std::shared_ptr<const std::vector<uint64_t>>> masks_;  // [state id], null until computed
  std::unordered_map<std::vector<int32_t>, int32_t, KeyHash> state_ids_;
  std::vector<std::array<int32_t, 256>> transitions_;  // [state id][byte]: -2 unknown, -1 dead
  std::vector<uint8_t> continues_;   // [state id] can_continue
  MatchState next_;                  // scratch of step
  GrammarStats stats_;
};

}  // namespace pagoda::structured
