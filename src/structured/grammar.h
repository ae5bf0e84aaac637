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

#include "core/status.h"
#include "structured/code_points.h"

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
  // One character of a normalized set: a byte set when every code point is ASCII, else a rule
  // with one alternative per UTF-8 byte sequence (code_points.h). An empty set matches nothing.
  Element chars(const CodePointSet& set, std::string name = "chars");

 private:
  Grammar& g_;
};

// Exactly one of `choices` (each as its bytes; "" is the empty reply).
Grammar choice_grammar(const std::vector<std::string>& choices);

// Whether the matcher can run g: every reference names a rule, the root exists, no rule can
// reach itself without reading a byte (left recursion, or a repetition of something that can
// be empty: the matcher would expand it forever), and expanding references before the next byte
// never nests deeper than kMaxExpansion. The error names the rule. Grammars from users (GBNF)
// are checked before they are used; the builders here never make such grammars.
inline constexpr int64_t kMaxExpansion = 256;
Status check_grammar(const Grammar& g);

}  // namespace pagoda::structured
