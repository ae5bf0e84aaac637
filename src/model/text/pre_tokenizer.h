// Pre-tokenizers of byte-level BPE vocabularies: a text is cut into pieces ("words") by a
// sequence of regexes before BPE runs on each piece (Hugging Face's Split(Regex, Isolated) in a
// Sequence, and llama.cpp's regex_exprs for each tokenizer.ggml.pre name).
//
// Semantics (each step "isolates" its matches): the pieces start as [the whole text]; each regex
// in turn is run over every current piece on its own (lookarounds and anchors see the piece's
// ends as the text's ends), and the piece is replaced by its matches and the non-empty gaps
// between them, in order. So the pieces always tile the text exactly.
//
// The regexes are Oniguruma syntax as written in tokenizer.json; they run on ICU's regex engine
// (UTF-16) after three rewrites that keep Oniguruma's meaning: \s / \S -> \p{White_Space} /
// \P{White_Space}, $ -> (?=\n|\z), and $ inside a class escaped. Unicode categories (\p{L},
// \p{N}, ...) are ICU's. Bytes that are not valid UTF-8 stand for U+FFFD while matching and stay
// as they are in the pieces.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pagoda::model {

// The regexes llama.cpp runs for a tokenizer.ggml.pre name; for the names Hugging Face files
// also carry (llama-bpe, qwen2, deepseek-v3, gpt-2) they are the tokenizer.json regexes.
// Names: default, gpt-2 (= mpt, gpt-neox, olmo), llama-bpe (= llama3, llama-v3, dbrx,
// smaug-bpe), qwen2 (= stablelm2), deepseek-llm, deepseek-coder, deepseek-v3, falcon,
// starcoder (= refact, command-r, smollm, codeshell, exaone).
Result<std::vector<std::string>> pre_tokenizer_regexes(std::string_view pre_name);

// The GPT-2 regex (Hugging Face's ByteLevel pre-tokenizer with use_regex = true).
inline constexpr std::string_view kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class PreTokenizer {
 public:
  // Compiles every regex; a bad one is an error naming it and ICU's reason.
  static Result<PreTokenizer> create(const std::vector<std::string>& regexes);

  // Byte spans [begin, end) of `text`, in order, tiling it; empty for an empty text.
  // No regexes: the whole text is one piece. Thread-safe (const, per-call matchers).
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

  const std::vector<std::string>& regexes() const { return regexes_; }

 private:
  struct Compiled;  // ICU patterns, shared by copies (immutable after create)
  std::vector<std::string> regexes_;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace pagoda::model
