#include "structured/matcher.h"

#include <algorithm>

namespace pagoda::structured {

namespace {

const Element& element_at(const Grammar& g, const Position& p) {
  return g.rules[static_cast<size_t>(p.rule)][static_cast<size_t>(p.alt)][static_cast<size_t>(p.index)];
}

size_t alt_size(const Grammar& g, const Position& p) {
  return g.rules[static_cast<size_t>(p.rule)][static_cast<size_t>(p.alt)].size();
}

// Expands `stack` until its top is a byte set (or it is empty: complete) and adds the results.
void expand(const Grammar& g, Stack stack, std::vector<Stack>& out) {
  while (!stack.empty() && static_cast<size_t>(stack.back().index) == alt_size(g, stack.back())) stack.pop_back();
  if (stack.empty()) {
    out.push_back(std::move(stack));
    return;
  }
  const Element& e = element_at(g, stack.back());
  if (e.rule < 0) {
    out.push_back(std::move(stack));
    return;
  }
  if (stack.size() >= kMaxDepth) return;  // deeper than any grammar we build: dropped
  // The caller continues after the reference; a call in tail position replaces its caller.
  Stack base = stack;
  ++base.back().index;
  if (static_cast<size_t>(base.back().index) == alt_size(g, base.back())) base.pop_back();
  const auto& alts = g.rules[static_cast<size_t>(e.rule)];
  for (size_t a = 0; a < alts.size(); ++a) {
    Stack s = base;
    s.push_back(Position{e.rule, static_cast<int32_t>(a), 0});
    expand(g, std::move(s), out);
  }
}

void normalize(MatchState& s) {
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
}

}  // namespace

MatchState initial_state(const Grammar& g) {
  MatchState s;
  const auto& alts = g.rules[static_cast<size_t>(g.root)];
  for (size_t a = 0; a < alts.size(); ++a) expand(g, Stack{Position{g.root, static_cast<int32_t>(a), 0}}, s.stacks);
  normalize(s);
  return s;
}

void advance(const Grammar& g, const MatchState& s, uint8_t byte, MatchState& out) {
  out.stacks.clear();
  for (const Stack& stack : s.stacks) {
    if (stack.empty()) continue;
    if (!element_at(g, stack.back()).bytes.test(byte)) continue;
    Stack next = stack;
    ++next.back().index;
    expand(g, std::move(next), out.stacks);
  }
  normalize(out);
}

bool advance_text(const Grammar& g, MatchState& s, std::string_view text) {
  MatchState cur = s, next;
  for (unsigned char c : text) {
    advance(g, cur, c, next);
    if (next.empty()) return false;
    std::swap(cur, next);
  }
  s = std::move(cur);
  return true;
}

bool accepting(const MatchState& s) {
  return std::any_of(s.stacks.begin(), s.stacks.end(), [](const Stack& st) { return st.empty(); });
}

bool can_continue(const MatchState& s) {
  return std::any_of(s.stacks.begin(), s.stacks.end(), [](const Stack& st) { return !st.empty(); });
}

void state_key(const MatchState& s, std::vector<int32_t>& out) {
  out.clear();
  for (const Stack& st : s.stacks) {
    out.push_back(static_cast<int32_t>(st.size()));
    for (const Position& p : st) {
      out.push_back(p.rule);
      out.push_back(p.alt);
      out.push_back(p.index);
    }
  }
}

}  // namespace pagoda::structured
