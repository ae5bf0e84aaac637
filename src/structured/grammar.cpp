#include "structured/grammar.h"

#include <algorithm>
#include <utility>

namespace pagoda::structured {

int32_t Grammar::add_rule(std::string name) {
  rules.emplace_back();
  names.push_back(std::move(name));
  return static_cast<int32_t>(rules.size() - 1);
}

Element byte_set(const ByteSet& bytes) { return Element{-1, bytes}; }

Element byte_range(uint8_t lo, uint8_t hi) {
  Element e;
  for (int b = lo; b <= hi; ++b) e.bytes.set(static_cast<size_t>(b));
  return e;
}

Element ref(int32_t rule) { return Element{rule, {}}; }

int32_t GrammarBuilder::literal(std::string_view text) {
  Alternative seq;
  for (unsigned char c : text) seq.push_back(byte_range(c, c));
  return rule("\"" + std::string(text) + "\"", {seq});
}

int32_t GrammarBuilder::rule(std::string name, std::vector<Alternative> alternatives) {
  const int32_t r = g_.add_rule(std::move(name));
  for (Alternative& a : alternatives) g_.add_alternative(r, std::move(a));
  return r;
}

int32_t GrammarBuilder::star(const Element& item, std::string name) {
  const int32_t r = g_.add_rule(std::move(name));
  g_.add_alternative(r, {item, ref(r)});
  g_.add_alternative(r, {});
  return r;
}

int32_t GrammarBuilder::plus(const Element& item, std::string name) {
  const int32_t tail = star(item, name + "-tail");
  return rule(std::move(name), {{item, ref(tail)}});
}

int32_t GrammarBuilder::opt(const Element& item, std::string name) { return rule(std::move(name), {{item}, {}}); }

int32_t GrammarBuilder::repeat(const Element& item, int64_t lo, int64_t hi, int32_t sep, std::string name) {
  // first item, then (sep item) repeated: lo - 1 required, then up to hi - lo optional
  // (unbounded: a star). Zero items allowed when lo == 0.
  Alternative rest;
  const Element sep_item = sep >= 0 ? ref(rule(name + "-sep-item", {{ref(sep), item}})) : item;
  for (int64_t i = 1; i < lo; ++i) rest.push_back(sep_item);
  if (hi < 0) {
    rest.push_back(ref(star(sep_item, name + "-more")));
  } else {
    // Nested optionals: (x (x (x)?)?)? for hi - max(lo, 1) items.
    int32_t tail = -1;
    for (int64_t i = std::max<int64_t>(lo, 1); i < hi; ++i) {
      Alternative a = {sep_item};
      if (tail >= 0) a.push_back(ref(tail));
      tail = rule(name + "-opt", {a, {}});
    }
    if (tail >= 0) rest.push_back(ref(tail));
  }
  Alternative some = {item};
  some.insert(some.end(), rest.begin(), rest.end());
  std::vector<Alternative> alts = {some};
  if (lo == 0) alts.push_back({});
  return rule(std::move(name), std::move(alts));
}

}  // namespace pagoda::structured

namespace pagoda::structured {

Element GrammarBuilder::chars(const CodePointSet& set, std::string name) {
  if (set.ascii_only()) {
    Element e;
    for (const CodePointRange& r : set.ranges) {
      for (uint32_t c = r.lo; c <= r.hi; ++c) e.bytes.set(c);
    }
    return e;
  }
  std::vector<Utf8Sequence> seqs;
  for (const CodePointRange& r : set.ranges) utf8_sequences(r.lo, r.hi, seqs);
  const int32_t rule = g_.add_rule(std::move(name));
  Element ascii;  // the one-byte sequences share one alternative
  for (const Utf8Sequence& seq : seqs) {
    if (seq.size() == 1) {
      for (int b = seq[0].lo; b <= seq[0].hi; ++b) ascii.bytes.set(static_cast<size_t>(b));
      continue;
    }
    Alternative alt;
    for (const ByteRange& br : seq) alt.push_back(byte_range(br.lo, br.hi));
    g_.add_alternative(rule, std::move(alt));
  }
  if (ascii.bytes.any()) g_.add_alternative(rule, {ascii});
  return ref(rule);
}

Grammar choice_grammar(const std::vector<std::string>& choices) {
  Grammar g;
  g.root = g.add_rule("choice");
  for (const std::string& c : choices) {
    Alternative alt;
    for (unsigned char b : c) alt.push_back(byte_range(b, b));
    g.add_alternative(g.root, std::move(alt));
  }
  return g;
}

Status check_grammar(const Grammar& g) {
  const size_t n = g.rules.size();
  if (g.root < 0 || static_cast<size_t>(g.root) >= n) return Status::invalid_argument("the grammar has no root rule");
  const auto name = [&](size_t r) { return r < g.names.size() ? g.names[r] : "#" + std::to_string(r); };
  for (size_t r = 0; r < n; ++r) {
    for (const Alternative& alt : g.rules[r]) {
      for (const Element& e : alt) {
        if (e.rule >= static_cast<int32_t>(n)) return Status::invalid_argument("rule " + name(r) + " refers to no rule");
      }
    }
  }
  // Nullable rules, to a fixpoint.
  std::vector<uint8_t> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Alternative& alt : g.rules[r]) {
        if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return e.rule >= 0 && nullable[static_cast<size_t>(e.rule)]; })) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  const auto is_nullable = [&](const Element& e) { return e.rule >= 0 && nullable[static_cast<size_t>(e.rule)]; };
  // Depth-first over "expanded before the next byte" edges (r -> a reference after a run of
  // nullable elements), without recursion: a cycle is left recursion; depth[r] is the deepest
  // nesting of expansions starting in r (matcher.cpp's expand recurses once per reference, and
  // once more per nullable reference it passes).
  enum : uint8_t { kNew, kOpen, kDone };
  std::vector<uint8_t> color(n, kNew);
  std::vector<int64_t> depth(n, 0);
  std::vector<std::pair<size_t, size_t>> frames;  // (rule, next edge index)
  std::vector<std::vector<int32_t>> edges(n);
  // Only edges reachable without a byte matter for cycles: those after a nullable run.
  const auto left_edges = [&](size_t r) {
    std::vector<int32_t> out;
    for (const Alternative& alt : g.rules[r]) {
      for (const Element& e : alt) {
        if (e.rule < 0) break;
        out.push_back(e.rule);
        if (!nullable[static_cast<size_t>(e.rule)]) break;
      }
    }
    return out;
  };
  for (size_t r = 0; r < n; ++r) edges[r] = left_edges(r);
  // How deep expand() recurses from position k of alt: each reference it expands nests one
  // level (plus that rule's own depth), and passing a nullable reference nests one more.
  const auto run_depth = [&](const Alternative& alt, size_t k) {
    int64_t deepest = 0, level = 0;
    for (; k < alt.size() && alt[k].rule >= 0; ++k) {
      deepest = std::max(deepest, level + 1 + depth[static_cast<size_t>(alt[k].rule)]);
      if (!is_nullable(alt[k]) || deepest > kMaxExpansion) break;
      ++level;
    }
    return deepest;
  };
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != kNew) continue;
    frames.push_back({start, 0});
    color[start] = kOpen;
    while (!frames.empty()) {
      auto& [r, next] = frames.back();
      if (next < edges[r].size()) {
        const auto to = static_cast<size_t>(edges[r][next++]);
        if (color[to] == kOpen) {
          return Status::invalid_argument("rule " + name(to) +
                                          " can reach itself without reading a character (left recursion, or a "
                                          "repetition of something that can be empty); rewrite it");
        }
        if (color[to] == kNew) {
          color[to] = kOpen;
          frames.push_back({to, 0});
        }
        continue;
      }
      // Every callee is done: the deepest expansion from r's start.
      int64_t d = 0;
      for (const Alternative& alt : g.rules[r]) d = std::max(d, run_depth(alt, 0));
      depth[r] = d;
      color[r] = kDone;
      frames.pop_back();
    }
  }
  // From every position a stack's top can be at after a byte (or after a rule completes).
  for (size_t r = 0; r < n; ++r) {
    for (const Alternative& alt : g.rules[r]) {
      for (size_t k = 0; k < alt.size(); ++k) {
        const int64_t d = run_depth(alt, k);
        if (d > kMaxExpansion) {
          return Status::invalid_argument("rule " + name(r) + " nests " + std::to_string(d) +
                                          " rules before its next character (at most " + std::to_string(kMaxExpansion) + ")");
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace pagoda::structured
