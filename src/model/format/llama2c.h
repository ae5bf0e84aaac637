// Import of llama2.c checkpoints (Karpathy's run.c format) into an in-memory GgufFile.
//
// Model file, legacy version 0: a header of 7 int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len), then float32 arrays in this order:
//   token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim],
//   wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim], w1 [L][hidden][dim],
//   w2 [L][dim][hidden], w3 [L][hidden][dim], rms_final [dim],
//   (optional) freq_cis_real [seq_len][head_dim/2], freq_cis_imag [seq_len][head_dim/2],
//   wcls [vocab][dim] only when the header's vocab_size is negative (else shared).
// Matrices are [out][in] row-major, which is GGUF's ne0 = in; llama2.c keeps Q/K unpermuted
// (RoPE on adjacent pairs), as GGUF llama does, so bytes are copied as is.
//
// tokenizer.bin: u32 max_token_length, then per token: f32 score, i32 len, len bytes.
//
// The result has the metadata and tensor names/order of llama.cpp's convert-llama2c-to-ggml
// (see stories260K.gguf), except: llama.context_length is the trained seq_len, general.name
// is the model file's stem, and the bogus separator/padding ids (u32 -1) are left out.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/format/gguf.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {

struct Llama2cHeader {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // always positive here; see shared_classifier
  int32_t seq_len = 0;
  bool shared_classifier = true;  // header vocab_size > 0: wcls is the token embedding

  int32_t head_dim() const { return dim / n_heads; }
  int32_t kv_dim() const { return n_kv_heads * head_dim(); }
};

// Reads and validates the header (positive, plausible, dim % n_heads == 0,
// n_heads % n_kv_heads == 0, even head_dim) and checks the file size against it.
// Reads a llama2.c tokenizer.bin: u32 max_token_length, then per token f32 score, u32 len,
// len bytes. Spaces become "▁"; ids 1/2 ("\n<s>\n"/"\n</s>\n") become "<s>"/"</s>" (CONTROL);
// id 0 is UNKNOWN, "<0xNN>" tokens BYTE, the rest NORMAL; bos 1, eos 2, unk 0. The file must
// hold exactly vocab_size tokens.
Result<Vocab> read_llama2c_vocab(const std::string& path, int32_t vocab_size);

Result<Llama2cHeader> read_llama2c_header(const std::string& model_path);

// Builds the GGUF equivalent of a llama2.c checkpoint and its tokenizer.bin.
Result<GgufFile> import_llama2c(const std::string& model_path, const std::string& tokenizer_path);

}  // namespace pagoda::model
