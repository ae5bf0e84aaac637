// Token masks from the vocabulary trie against brute force (each token's bytes fed to the
// matcher one by one), on a synthetic vocabulary of every short JSON-ish string and on
// stories260K's real one, at states along valid replies; cached masks equal fresh ones.
#include <gtest/gtest.h>

#include "model/format/llama2c.h"
#include "model/text/tokenizer.h"
#include "structured/json_schema.h"
#include "structured/token_index.h"
#include "test_data.h"

namespace pagoda::structured {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<uint64_t> brute_force(const Grammar& g, const MatchState& s, const TokenIndex& index) {
  std::vector<uint64_t> bits((static_cast<size_t>(index.n_vocab()) + 63) / 64, 0);
  for (int32_t t = 0; t < index.n_vocab(); ++t) {
    MatchState copy = s;
    if (!index.piece(t).empty() && advance_text(g, copy, index.piece(t))) bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
  }
  return bits;
}

void check_along(const std::vector<std::string>& pieces, const char* schema, const std::string& reply) {
  auto g = grammar_from_json_schema(ojson::parse(schema));
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto index = std::make_shared<const TokenIndex>(pieces);
  CompiledGrammar compiled(*g, index);
  MatchState s = compiled.initial();
  for (size_t i = 0; i <= reply.size(); ++i) {
    SCOPED_TRACE("after " + reply.substr(0, i));
    const auto fresh = compiled.mask(s);
    EXPECT_EQ(*fresh, brute_force(*g, s, *index));
    EXPECT_EQ(*compiled.mask(s), *fresh);  // from the cache
    if (i < reply.size()) {
      ASSERT_TRUE(advance_text(*g, s, reply.substr(i, 1)));
    }
  }
  EXPECT_GT(compiled.stats().mask_hits, 0);
}

TEST(TokenIndex, MasksEqualBruteForceOnASyntheticVocabulary) {
  std::vector<std::string> pieces = {"", "{", "}", "\"", "\":", "\": ", ", \"", "true", "tr", "ue", "false", "null", "0",
                                     "12", "-", ".", "5e", "e+", " ", "\n", "  ", "[", "]", "[]", "{}", "\"a", "a\"", "ab",
                                     "\\n", "\\", "n", "x", "name", "\"name\"", "\": \"", "\"}", "\u00e9", "1.5", "}\n"};
  const char* schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
      "n": {"type": "number"}, "ok": {"type": "boolean"}, "l": {"type": "array", "items": {"type": "null"}}},
      "required": ["name"]})";
  check_along(pieces, schema, R"( {"name": "ab\n", "n": -12.5e+3, "ok": true, "l": [null, null]} )");
}

TEST(TokenIndex, MasksEqualBruteForceOnStoriesVocabulary) {
  auto vocab = model::read_llama2c_vocab(testing::stories_dir() + "/tok512.bin", 512);
  ASSERT_TRUE(vocab.is_ok()) << vocab.status().message();
  auto tok = model::Tokenizer::create(std::move(*vocab));
  ASSERT_TRUE(tok.is_ok());
  std::vector<std::string> pieces;
  for (int32_t t = 0; t < tok->vocab_size(); ++t) pieces.push_back(tok->token_to_piece(t));
  check_along(pieces, R"({"type": "object", "properties": {"story": {"type": "string", "maxLength": 12},
      "good": {"type": "boolean"}}, "required": ["story", "good"]})",
              R"({"story": "Once upon", "good": false})");
}

}  // namespace
}  // namespace pagoda::structured
