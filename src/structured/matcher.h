// Matcher state over a Grammar: the set of parse stacks still alive after the bytes so far
// (llama.cpp's grammar stacks, written anew). A stack is a list of positions (rule,
// alternative, next element), innermost last; a live stack's last position always points at a
// byte set (references are expanded eagerly, calls in tail position replace their caller, so a
// repetition does not grow the stack). An empty stack means the grammar is complete there.
//
//   MatchState s = initial_state(g);
//   advance(g, s, byte, out)   // out: the stacks that accept `byte`, expanded; empty = dead
//   accepting(s)               // some stack is complete: the text so far is a sentence
//   can_continue(s)            // some stack wants more bytes
//
// States are kept sorted and unique, so equal states compare equal (the mask cache's key).
// Expansion is bounded (kMaxDepth positions per stack; json_schema.h refuses schemas nested
// deep enough to need more).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace pagoda::structured {

struct Position {
  int32_t rule = 0;
  int32_t alt = 0;
  int32_t index = 0;  // next element of rules[rule][alt]
  auto operator<=>(const Position&) const = default;
};
using Stack = std::vector<Position>;

struct MatchState {
  std::vector<Stack> stacks;  // sorted, unique
  bool operator==(const MatchState& o) const { return stacks == o.stacks; }
  bool empty() const { return stacks.empty(); }
};

inline constexpr size_t kMaxDepth = 1024;

MatchState initial_state(const Grammar& g);
// out = the state after `byte` (out is overwritten; may not alias s).
void advance(const Grammar& g, const MatchState& s, uint8_t byte, MatchState& out);
// Advances through every byte of text; false (s unchanged) when some byte is refused.
bool advance_text(const Grammar& g, MatchState& s, std::string_view text);
bool accepting(const MatchState& s);
bool can_continue(const MatchState& s);
// A flat key of the state (for hashing).
void state_key(const MatchState& s, std::vector<int32_t>& out);

}  // namespace pagoda::structured
