// Reads a tokenizer Vocab out of GGUF metadata (tokenizer.ggml.*) and writes one back.
#pragma once

#include "core/status.h"
#include "model/format/gguf.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {

// Needs tokenizer.ggml.model "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE: also
// tokenizer.ggml.merges; tokenizer.ggml.pre names the pre-tokenizer, "default" when absent) and
// tokenizer.ggml.tokens; scores, token_type, bos/eos/unk ids and add_bos/add_eos/
// add_space_prefix fall back to llama.cpp's defaults for the model when absent. gpt2: the
// tokenizer.pagoda.* keys that vocab_to_gguf writes (pre_regexes, ignore_merges, normalize_nfc)
// override what the pre name implies (llama-bpe: ignore_merges; qwen2: NFC, as their
// tokenizer.json files say).
Result<Vocab> vocab_from_gguf(const GgufFile& file);

// Stores the vocab as tokenizer.ggml.* keys: model "gpt2" for byte-level kBpe (plus the
// tokenizer.pagoda.* keys above), else "llama"; a SentencePiece-style kBpe vocab is stored as
// spm_vocab_from_merges(vocab).
void vocab_to_gguf(const Vocab& vocab, GgufFile& file);

// A SentencePiece-style kBpe vocab (byte_level = false) as kSpm, as llama.cpp's converter stores
// Llama 2: each token's score is -(the lowest rank of a merge that makes it), tokens no merge
// makes score below every merge. Merging by these scores is merging by rank when, as in
// tokenizer.json files converted from SentencePiece, every merge that makes a token has that
// token's rank order.
Vocab spm_vocab_from_merges(const Vocab& vocab);

}  // namespace pagoda::model
