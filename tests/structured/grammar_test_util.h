// Helpers of the grammar tests (gbnf_test, regex_test): whether a grammar matches a whole text,
// and every short string over an alphabet (the exhaustive inputs compared with std::regex).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace pagoda::structured::testing {

inline bool matches(const Grammar& g, std::string_view text) {
  MatchState s = initial_state(g);
  return advance_text(g, s, text) && accepting(s);
}

// Every string of 0..max_len characters over alphabet.
inline std::vector<std::string> all_strings(const std::string& alphabet, size_t max_len) {
  std::vector<std::string> out = {""};
  for (size_t begin = 0, len = 0; len < max_len; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
  return out;
}

}  // namespace pagoda::structured::testing
