// Grammar: a context-free grammar over bytes, the form every constraint compiles to (JSON
// schemas: json_schema.h). A rule is a list of alternatives; an alternative a sequence of
// elements; an element a set of bytes (one byte of input) or a reference to a rule. Repetition
// is written with helper rules (star, plus, opt below), never left-recursively: the matcher
// (matcher.h) expands references depth-first and would not terminate on left recursion, which
// the builder cannot create.
//
// Bytes, not code points: a set may hold bytes >= 0x80, so "any character but '"' and '\'"
// is one set of bytes and multi-byte UTF-8 passes byte by byte.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::structured {

using ByteSet = std::bitset<256>;

struct Element {
  int32_t rule = -1;  // >= 0: a reference to rules[rule]; -1: one byte of `bytes`
  ByteSet bytes;
};
using Alternative = std::vector<Element>;  // empty: matches nothing (epsilon)

struct Grammar {
  std::vector<std::vector<Alternative>> rules;  // [rule][alternative] -> elements
  std::vector<std::string> names;               // [rule] for messages and dumps
  int32_t root = -1;

  int32_t add_rule(std::string name);  // an empty rule (no alternatives yet)
  void add_alternative(int32_t rule, Alternative alt) { rules[static_cast<size_t>(rule)].push_back(std::move(alt)); }
  size_t num_rules() const { return rules.size(); }
};

// Building blocks (each returns an element to put in a sequence).
Element byte_set(const ByteSet& bytes);
Element byte_range(uint8_t lo, uint8_t hi);
Element ref(int32_t rule);

class GrammarBuilder {
 public:
  explicit GrammarBuilder(Grammar& g) : g_(g) {}
  // A rule matching exactly `text`.
  int32_t literal(std::string_view text);
  // A rule with the given alternatives.
  int32_t rule(std::string name, std::vector<Alternative> alternatives);
  // item* / item+ / item? as rules (right-recursive).
  int32_t star(const Element& item, std::string name = "star");
  int32_t plus(const Element& item, std::string name = "plus");
  int32_t opt(const Element& item, std::string name = "opt");
  // item repeated between lo and hi times (hi < 0: no upper bound), items separated by `sep`
  // (sep < 0: no separator).
  int32_t repeat(const Element& item, int64_t lo, int64_t hi, int32_t sep, std::string name = "repeat");

 private:
  Grammar& g_;
};

}  // namespace pagoda::structured
