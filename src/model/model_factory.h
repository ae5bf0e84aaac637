// Random-weight models of named shapes (fixed seed), written as ordinary GGUF files so that
// benchmarks, tests and llama.cpp all load the same bytes. Also the built-in default model.
//
// Weights: uniform in [-a, a] with a = sqrt(3 / n_in) (unit-variance activations), norms 1.
// Vocab: SentencePiece-style with <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, "▁",
// printable ASCII, then synthetic multi-letter pieces up to the vocab size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace pagoda::model {

struct ModelShape {
  std::string name;
  int64_t n_embd, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
  std::string arch = "llama";  // or "qwen2" (q/k/v biases, NeoX RoPE)
  int64_t sliding_window = 0;  // > 0: written as {arch}.attention.sliding_window
};

// Known shapes: "default" (built in), "tiny" (tests), "llama-110m", "tinyllama-1.1b".
const std::vector<ModelShape>& model_shapes();
Result<ModelShape> find_model_shape(const std::string& name);

// A byte-level SPM vocab of n_vocab tokens (n_vocab >= 260).
Vocab make_synthetic_vocab(int64_t n_vocab);

// Builds the model in memory. 2-D weights use `dtype`; norms are f32.
Result<GgufFile> make_random_model(const ModelShape& shape, DType dtype, uint64_t seed = 1234);

// The built-in default model ("default" shape, f32, seed 1234).
Result<GgufFile> make_default_model();

}  // namespace pagoda::model
