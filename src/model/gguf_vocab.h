// Reads a tokenizer Vocab out of GGUF metadata (tokenizer.ggml.*) and writes one back.
#pragma once

#include "core/status.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace pagoda::model {

// Needs tokenizer.ggml.model == "llama" (SentencePiece BPE) and tokenizer.ggml.tokens; scores,
// token_type, bos/eos/unk ids and add_bos/add_eos/add_space_prefix fall back to llama.cpp's
// defaults for SPM when absent.
Result<Vocab> vocab_from_gguf(const GgufFile& file);

// Stores the vocab as tokenizer.ggml.* keys (model "llama").
void vocab_to_gguf(const Vocab& vocab, GgufFile& file);

}  // namespace pagoda::model
