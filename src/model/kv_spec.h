// KvSpec: the shape of a model that decides its KV cache size, read from a GGUF file's metadata
// or a Hugging Face config.json without loading any weights. `pagoda kvcalc` (tools/) turns it
// into the planner's kvcache::KvModelSpec: model and kvcache are siblings and never include
// each other, so this is a plain struct with the same fields.
//
// GGUF keys ({arch} = general.architecture): {arch}.block_count, .attention.head_count,
// .attention.head_count_kv (default head_count), .attention.key_length (default
// embedding_length / head_count), .context_length, .attention.sliding_window, and for MLA
// (deepseek2) .attention.kv_lora_rank with .rope.dimension_count as the rope key width.
// Files of an architecture Pagoda runs (model/arch/registry.h; MLA aside) go through
// config_from_gguf, the same validation the engine applies. The registry's default sliding
// pattern (gemma2 2, gemma3 6, cohere2 4) applies where the file states none.
//
// config.json keys: num_hidden_layers, num_attention_heads, num_key_value_heads (default
// heads), head_dim (default hidden_size / heads), max_position_embeddings, kv_lora_rank +
// qk_rope_head_dim (MLA), sliding_window with the layer pattern from layer_types, else
// use_sliding_window + max_window_layers (Qwen2: layers >= max_window_layers slide), else
// sliding_window_pattern (layer i slides unless (i + 1) % pattern == 0; absent: the registry's
// default for the model_type, Gemma 2: 2, Gemma 3: 6), else every layer (Mistral). Multimodal configs are read from their "text_config".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::model {

class GgufFile;

struct KvSpec {
  std::string name;           // general.name / _name_or_path, else the file name
  std::string format;         // "GGUF" or "config.json"
  std::string architecture;   // general.architecture / model_type
  int64_t n_layer = 0;
  int64_t n_head = 0;         // query heads
  int64_t n_kv_head = 0;      // K/V heads per layer
  int64_t head_dim = 0;       // per K/V head
  int64_t kv_lora_rank = 0;   // > 0: MLA, caching kv_lora_rank + qk_rope_head_dim per token and layer
  int64_t qk_rope_head_dim = 0;
  int64_t sliding_window = 0;           // tokens; 0: none
  std::vector<bool> layer_is_sliding;   // [n_layer] when only some layers slide; empty: all (if window)
  int64_t max_context = 0;    // 0: unknown
  int64_t n_kv_layers = 0;    // CLA ({arch}.attention.kv_source_layer): layers owning K/V; 0: all
  int64_t weight_bytes = 0;   // 0: unknown
  std::string weight_source;  // how weight_bytes was found ("tensor bytes", "estimated ...") or why not
  // Mixture of experts (GGUF): bytes one decode token reads (moe_active_bytes), the decode
  // floor; the whole weight_bytes stays resident. 0: a dense model or unknown.
  int64_t active_weight_bytes = 0;
  int64_t n_expert = 0, n_expert_used = 0;
};

// The tensor bytes one token reads in a mixture-of-experts GGUF file: every tensor but the
// experts' ("*_exps.*", of which it reads n_expert_used / n_expert) and the embedding table (one
// row of it; a tied classifier reads it whole). Shared experts and dense layers count whole.
int64_t moe_active_bytes(const GgufFile& file, int64_t n_expert, int64_t n_expert_used);

// From GGUF metadata; weight_bytes is the sum of the tensors' bytes (a header-only read is enough).
Result<KvSpec> kv_spec_from_gguf(const GgufFile& file);

// From the text of a config.json. `fallback_name` names the model when the config does not.
// Weights are estimated (parameters x torch_dtype size) for dense Llama/Mistral/Qwen/Gemma
// configs; otherwise weight_bytes is 0 and weight_source says why.
Result<KvSpec> kv_spec_from_hf_config(std::string_view json_text, const std::string& fallback_name);

// A GGUF file (sniffed by its magic), a config.json, or a directory holding config.json.
// Errors name the path.
Result<KvSpec> read_kv_spec(const std::string& path);

}  // namespace pagoda::model
