// Constrained decoding's own costs (no model): grammar compile time for a 20-property schema,
// a 50-tool call schema, a GBNF JSON grammar (llama.cpp's grammar format) and a regular
// expression (an ISO 8601 timestamp), the vocabulary trie's build, and the mask per generated
// token (first sight of a state vs the cache) along random replies drawn from the masks.
//   build/bin/structured_bench MODEL.gguf [replies]
// Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "model/text/tokenizer.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/token_index.h"

using namespace pagoda;
using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

ojson twenty_properties() {
  ojson props = ojson::object();
  const char* types[] = {"string", "integer", "number", "boolean"};
  for (int i = 0; i < 20; ++i) {
    ojson p = {{"type", types[i % 4]}};
    if (i % 4 == 0) p["maxLength"] = 24;
    if (i % 5 == 4) p = {{"enum", {"red", "green", "blue"}}};
    props["field_" + std::to_string(i)] = p;
  }
  ojson required = ojson::array();
  for (int i = 0; i < 20; i += 2) required.push_back("field_" + std::to_string(i));
  return {{"type", "object"}, {"properties", props}, {"required", required}};
}

// A call to one of 50 tools: {"name": const, "arguments": {its parameters}}, as anyOf.
ojson fifty_tools() {
  ojson alts = ojson::array();
  for (int t = 0; t < 50; ++t) {
    ojson params = ojson::object();
    for (int k = 0; k < 4; ++k) params["arg" + std::to_string(k)] = {{"type", k % 2 ? "integer" : "string"}, {"maxLength", 32}};
    if (true) {
      for (auto& [key, v] : params.items()) {
        if (v["type"] == "integer") v.erase("maxLength");
      }
    }
    alts.push_back({{"type", "object"},
                    {"properties", {{"name", {{"const", "tool_" + std::to_string(t)}}},
                                    {"arguments", {{"type", "object"}, {"properties", params}, {"required", {"arg0"}}}}}},
                    {"required", {"name", "arguments"}}});
  }
  return {{"anyOf", alts}};
}

// JSON as a GBNF grammar, written the way llama.cpp's grammars/json.gbnf is laid out.
const char* kJsonGbnf = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,2})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
)";
const char* kTimestampRegex = "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])T([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]\\d{2}:\\d{2})";

struct Rng {
  uint64_t s = 12345;
  uint64_t next() { return s = s * 6364136223846793005ull + 1442695040888963407ull; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: structured_bench MODEL.gguf [replies]\n");
    return 2;
  }
  const int replies = argc > 2 ? std::atoi(argv[2]) : 32;
  auto file = model::GgufFile::read(argv[1]);
  if (!file.is_ok()) return std::fprintf(stderr, "%s\n", file.status().message().c_str()), 1;
  auto vocab = model::vocab_from_gguf(*file);
  if (!vocab.is_ok()) return std::fprintf(stderr, "%s\n", vocab.status().message().c_str()), 1;
  auto tok = model::Tokenizer::create(std::move(*vocab));
  if (!tok.is_ok()) return std::fprintf(stderr, "%s\n", tok.status().message().c_str()), 1;

  auto t0 = Clock::now();
  std::vector<std::string> pieces(static_cast<size_t>(tok->vocab_size()));
  for (int32_t t = 0; t < tok->vocab_size(); ++t) pieces[static_cast<size_t>(t)] = tok->token_to_piece(t);
  auto index = std::make_shared<const structured::TokenIndex>(pieces);
  const double trie_s = since(t0);

  t0 = Clock::now();
  auto g20 = structured::grammar_from_json_schema(twenty_properties());
  const double compile20_s = since(t0);
  t0 = Clock::now();
  auto g50 = structured::grammar_from_json_schema(fifty_tools());
  const double compile50_s = since(t0);
  t0 = Clock::now();
  auto gbnf = structured::grammar_from_gbnf(kJsonGbnf);
  const double compile_gbnf_s = since(t0);
  t0 = Clock::now();
  auto regex = structured::grammar_from_regex(kTimestampRegex);
  const double compile_regex_s = since(t0);
  if (!g20.is_ok() || !g50.is_ok() || !gbnf.is_ok() || !regex.is_ok()) return std::fprintf(stderr, "compile failed\n"), 1;

  std::printf("{\"vocab\": %d, \"trie_build_ms\": %.2f, \"compile_20_properties_ms\": %.3f, \"grammar_rules_20\": %zu, "
              "\"compile_50_tools_ms\": %.3f, \"grammar_rules_50\": %zu, \"compile_gbnf_json_ms\": %.3f, "
              "\"grammar_rules_gbnf\": %zu, \"compile_regex_timestamp_ms\": %.3f, \"grammar_rules_regex\": %zu,\n",
              tok->vocab_size(), trie_s * 1e3, compile20_s * 1e3, g20->num_rules(), compile50_s * 1e3, g50->num_rules(),
              compile_gbnf_s * 1e3, gbnf->num_rules(), compile_regex_s * 1e3, regex->num_rules());
  const char* names[] = {"schema_20_properties", "tools_50", "gbnf_json", "regex_timestamp"};
  structured::Grammar* grammars[] = {&*g20, &*g50, &*gbnf, &*regex};
  constexpr int kGrammars = 4;
  for (int gi = 0; gi < kGrammars; ++gi) {
    structured::CompiledGrammar compiled(*grammars[gi], index);
    Rng rng;
    std::vector<double> first, cached;
    int64_t tokens = 0, complete = 0;
    for (int r = 0; r < replies; ++r) {
      structured::MatchState s = compiled.initial();
      for (int step = 0; step < 400; ++step) {
        const auto before = compiled.stats().mask_misses;
        const auto t1 = Clock::now();
        auto bits = compiled.mask(s);
        const double dt = since(t1);
        (compiled.stats().mask_misses > before ? first : cached).push_back(dt);
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < index->n_vocab(); ++t) {
          if (((*bits)[static_cast<size_t>(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
        }
        if (allowed.empty()) break;
        // Prefer tokens that close things (a random model rarely does): 1 in 3 draws the longest
        // allowed token that contains '}' or '"', else a uniform one.
        int32_t pick = allowed[rng.next() % allowed.size()];
        if (rng.next() % 3 == 0) {
          for (int32_t t : allowed) {
            if (index->piece(t).find_first_of("}\"]") != std::string::npos) pick = t;
          }
        }
        if (!structured::advance_text(compiled.grammar(), s, index->piece(pick))) return std::fprintf(stderr, "mask lied\n"), 1;
        ++tokens;
        if (structured::accepting(s) && !structured::can_continue(s)) {
          ++complete;
          break;
        }
      }
    }
    auto pct = [](std::vector<double> v, double q) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))] * 1e6;
    };
    double total = 0;
    for (double d : first) total += d;
    for (double d : cached) total += d;
    std::printf("\"%s\": {\"tokens\": %lld, \"replies_complete\": %lld, \"first_sight_masks\": %zu, \"first_sight_us_p50\": %.1f, "
                "\"first_sight_us_p90\": %.1f, \"cached_masks\": %zu, \"cached_us_p50\": %.2f, \"mean_us_per_token\": %.1f}%s\n",
                names[gi], (long long)tokens, (long long)complete, first.size(), pct(first, 0.5), pct(first, 0.9), cached.size(),
                pct(cached, 0.5), tokens ? total / static_cast<double>(tokens) * 1e6 : 0.0, gi + 1 < kGrammars ? "," : "}");
  }
  return 0;
}
