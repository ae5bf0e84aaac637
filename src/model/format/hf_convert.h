// A Hugging Face folder (HfCheckpoint + its tokenizer) -> a GGUF file as llama.cpp's own
// converter (convert_hf_to_gguf.py) writes it, so llama.cpp and Pagoda both load the result:
//   - tensor names of hf_checkpoint.h's map (llama.cpp's), matrices in their dtype (F32/F16/BF16),
//     1-D tensors (norms, biases) as F32 (llama.cpp's CPU ops take no BF16 bias);
//   - arch "llama": Q and K rows permuted from HF's rotate_half order to ggml's adjacent pairs
//     (per head of head_dim rows, HF row s * head_dim/2 + i becomes row 2i + s; K by its kv
//     heads), since llama.cpp runs Llama with normal (pairwise) RoPE; qwen2/qwen3 run NeoX-style
//     RoPE and keep HF's order;
//   - llama3 rope scaling as the tensor rope_freqs.weight (F32, [rot_dim / 2]), linear as
//     {arch}.rope.scaling.type/factor;
//   - the hyperparameters as {arch}.* keys, the tokenizer as tokenizer.ggml.* (vocab_to_gguf; rows
//     past the tokenizer padded with [PAD{id}] tokens of type UNUSED, as llama.cpp's converter), its
//     chat template as tokenizer.chat_template, a second end-of-generation id (generation_config.json)
//     as tokenizer.ggml.eot_token_id; general.file_type from the weights.
// Tied embeddings write no output.weight (llama.cpp then uses token_embd.weight, as Pagoda does).
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"
#include "model/format/gguf.h"
#include "model/format/hf_checkpoint.h"
#include "model/text/hf_tokenizer.h"

namespace pagoda::model {

// Called after each tensor with bytes done and the total (for a progress bar).
using ConvertProgress = std::function<void(int64_t done_bytes, int64_t total_bytes)>;

Result<GgufFile> gguf_from_hf(const HfCheckpoint& checkpoint, const HfTokenizer& tokenizer,
                              const ConvertProgress& progress = nullptr);

}  // namespace pagoda::model
