// Grammars from clients: any text -> grammar_from_gbnf / grammar_from_regex / a JSON Schema
// pattern gives a grammar or a Status with a message; never a crash or a hang. An accepted
// GBNF or regex grammar passes check_grammar (the matcher can run it), and the matcher runs it
// over the input's own first bytes. The first byte picks the parser: 'g' GBNF, 'r' regex,
// anything else a JSON Schema string pattern.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/regex.h"

using namespace pagoda::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  pagoda::Result<Grammar> g = Grammar{};
  if (data[0] == 'g') {
    g = grammar_from_gbnf(text);
  } else if (data[0] == 'r') {
    g = grammar_from_regex(text);
  } else {
    g = grammar_from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"pattern", text}});
  }
  if (!g.is_ok()) {
    if (g.status().message().empty()) pagoda::fuzz::fuzz_fail("grammar: error without a message");
    return 0;
  }
  pagoda::Status checked = check_grammar(*g);
  if (!checked.is_ok()) pagoda::fuzz::fuzz_fail("grammar accepted but not runnable:", checked.message());
  MatchState s = initial_state(*g), next;
  for (size_t i = 0; i < std::min<size_t>(text.size(), 32) && !s.empty(); ++i) {
    advance(*g, s, static_cast<uint8_t>(text[i]), next);
    std::swap(s, next);
  }
  return 0;
}
