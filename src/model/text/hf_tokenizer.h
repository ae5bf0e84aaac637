// Hugging Face tokenizer folders: tokenizer.json (+ tokenizer_config.json) -> Tokenizer.
//
// Supported tokenizer.json models:
//   - BPE with a ByteLevel pre-tokenizer/decoder (GPT-2, Llama 3, Qwen2/3, DeepSeek, ...):
//     merges by rank, the GPT-2 byte-to-unicode mapping, pre-tokenizer Split(Regex, Isolated) /
//     ByteLevel(use_regex) / Digits steps in a Sequence, normalizer NFC or none,
//     model.ignore_merges.
//   - SentencePiece-style BPE (Llama 2, Mistral): normalizer Prepend("▁") + Replace(" ", "▁")
//     and no pre-tokenizer, or pre-tokenizer Metaspace (split false); byte_fallback.
// added_tokens become USER_DEFINED (special=false: always matched) or CONTROL tokens
// (special=true: matched only with parse_special).
// tokenizer_config.json, when present, gives bos_token / eos_token (a string or an AddedToken
// object), add_bos_token / add_eos_token and chat_template (a string, or the "default" entry of
// a list of named templates). generation_config.json, when present, gives the ids that end a
// generation (eos_token_id: an id or a list, e.g. Llama 3 Instruct's <|end_of_text|> and
// <|eot_id|>): all of them are eos_ids, and the first is the EOS when tokenizer_config names none.
// Anything else unsupported is an error naming the part, never a silently different tokenizer.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {

struct HfTokenizer {
  Tokenizer tokenizer;        // tokenizer.vocab() carries bos/eos ids and add_bos/add_eos too
  int32_t bos_id = -1;        // -1: none
  int32_t eos_id = -1;        // -1: none
  std::vector<int32_t> eos_ids;  // every id that ends a generation (eos_id first), in the vocab
  bool add_bos = false;       // tokenizer_config add_bos_token (else what the post-processor adds)
  std::string chat_template;  // "" when there is none
};

// `dir` is a folder holding tokenizer.json and optionally tokenizer_config.json.
Result<HfTokenizer> load_hf_tokenizer(const std::string& dir);

}  // namespace pagoda::model
