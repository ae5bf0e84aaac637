// Reads a tokenizer Vocab out of GGUF metadata (tokenizer.ggml.*) and writes one back.
#pragma once

#include "core/status.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace pagoda::model {

// Needs tokenizer.ggml.model "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE: also
// tokenizer.ggml.merges; tokenizer.ggml.pre names the pre-tokenizer, "default" when absent) and
// tokenizer.ggml.tokens; scores, token_type, bos/eos/unk ids and add_bos/add_eos/
// add_space_prefix fall back to llama.cpp's defaults for the model when absent. gpt2: the
// tokenizer.pagoda.* keys that vocab_to_gguf writes (pre_regexes, ignore_merges, normalize_nfc)
// override what the pre name implies (llama-bpe: ignore_merges; qwen2: NFC, as their
// tokenizer.json files say).
Result<Vocab> vocab_from_gguf(const GgufFile& file);

// Stores the vocab as tokenizer.ggml.* keys (model "llama", or "gpt2" for kBpe, which must be
// byte_level) plus, for gpt2, the tokenizer.pagoda.* keys above.
void vocab_to_gguf(const Vocab& vocab, GgufFile& file);

}  // namespace pagoda::model
