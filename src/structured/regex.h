// Regular expression -> Grammar: a reply that matches a pattern as a whole (vLLM's
// `guided_regex`, `structured_outputs.regex`; JSON Schema's `pattern` inside strings).
//
// Syntax (ECMAScript's, which JSON Schema names; Python's for the common part): literals,
// '.', [classes] and [^negated] with ranges, escapes \d \D \w \W \s \S \n \r \t \f \v \0
// \xHH \uHHHH \u{H...} and escaped punctuation, groups (...), (?:...), (?<name>...),
// (?P<name>...), alternation '|', quantifiers * + ? {m} {m,} {m,n} (a trailing '?', lazy, does
// not change which texts match), '^' at the start and '$' at the end (a reply always matches
// as a whole). A '{' that does not start a quantifier is a literal, as in both dialects.
// '.' matches any code point but \n, \r, U+2028 and U+2029 (ECMAScript); classes and '.'
// match code points, as UTF-8 bytes (code_points.h).
//
// Refused, naming the construct and its offset: backreferences, lookaround, \b and \B, anchors
// elsewhere, inline flags, possessive quantifiers, \p{...}, invalid UTF-8, quantifier bounds
// over kMaxRegexRepeat, and patterns whose automaton passes kMaxRegexStates states or whose
// grammar passes kMaxRegexAlternatives alternatives.
//
// Compilation: the pattern's syntax tree -> a Thompson automaton over bytes (counted
// repetitions unrolled; optional copies nested, x(x(x)?)?, so no state has more than two
// epsilon successors in a chain) -> epsilon closures -> a right-linear grammar: one rule per
// state, alternatives [byte set, next state] and [] where the state accepts. The matcher then
// never nests (every stack is one position) and the masks' lazy automaton is the DFA.
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace pagoda::structured {

inline constexpr int64_t kMaxRegexRepeat = 1000;
inline constexpr size_t kMaxRegexStates = 100000;
inline constexpr size_t kMaxRegexAlternatives = 200000;

// The grammar of the texts that match `pattern` as a whole. Where `allowed` is given, every
// character class is intersected with it first (JSON strings: no '"', '\' or controls), so the
// grammar matches only texts made of allowed code points.
Result<Grammar> grammar_from_regex(std::string_view pattern, const CodePointSet* allowed = nullptr);

// Adds the pattern's rules to g (for a grammar that embeds it) and returns its start rule.
Result<int32_t> add_regex_rules(Grammar& g, std::string_view pattern, const CodePointSet* allowed = nullptr);

}  // namespace pagoda::structured
