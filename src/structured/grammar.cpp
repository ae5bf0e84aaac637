#include "structured/grammar.h"

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
