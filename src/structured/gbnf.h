// GBNF -> Grammar: llama.cpp's grammar format (as llama-server's `grammar` field takes it), so
// a client's grammar constrains replies here the same way.
//
//   root   ::= answer ws ("," ws answer)*      # a comment runs to the end of the line
//   answer ::= "yes" | "no" | [0-9]{1,3} | [^\n"]+ | .
//
// Rules `name ::= alternatives` (names of letters, digits, '-' and '_'; a rule ends where the
// next `name ::=` starts); alternatives separated by '|'; sequences of: "literals", [classes]
// ([^...] negated, a-z ranges), '.' (any character), rule names and (groups), each optionally
// followed by *, +, ?, {m}, {m,}, {m,n} or {,n}. Literals and classes are UTF-8 text of code
// points with the escapes \n \r \t \\ \" \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH; a class or '.'
// matches one code point, encoded as UTF-8 bytes (code_points.h). The grammar must define
// `root`.
//
// Refused with an error that names the line and column: syntax errors, an undefined or twice
// defined rule, llama.cpp's token references (<[id]>, <name>, !) which match tokens rather
// than text, invalid UTF-8, repetition bounds over kMaxGbnfRepeat, grammars over
// kMaxGbnfRules rules, and what check_grammar (grammar.h) refuses: left recursion and
// repetitions of what can be empty (llama.cpp refuses both too).
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace pagoda::structured {

inline constexpr int64_t kMaxGbnfRepeat = 1000;
inline constexpr size_t kMaxGbnfRules = 50000;

Result<Grammar> grammar_from_gbnf(std::string_view text);

}  // namespace pagoda::structured
