// The one registry of architectures: every architecture name a file can carry (GGUF
// `general.architecture`, a Hugging Face config.json's `architectures` class and `model_type`)
// maps here to what Pagoda knows of it. No other file compares architecture names: callers
// look an entry up and read its fields.
//
// Two kinds of entries:
//   - runnable (`arch` set): Pagoda loads and runs these files; the fields say how the family
//     differs (RoPE pair order in GGUF, q/k/v biases, q/k norms, YaRN, the Q/K row permutation
//     `convert` applies). An unsupported GGUF is refused from its header (check_runnable),
//     before any weight is read.
//   - known to `kvcalc` only (`arch` unset): enough to size the KV cache and estimate the
//     weights of a config.json or GGUF header Pagoda cannot run yet (sliding-window patterns,
//     norm counts, tied embeddings).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"
#include "model/model_config.h"

namespace pagoda::model {

class GgufFile;
struct ModelShape;
struct WeightMix;

namespace arch {

// A family's own GGUF keys, read after the common ones (prefix "{arch}.").
using ReadGguf = Status (*)(const GgufFile& file, const std::string& prefix, ModelConfig& config);
// A family's random-weight writer (model_factory.h's make_random_model for its shapes).
using WriteRandom = Result<GgufFile> (*)(const ModelShape& shape, const WeightMix& mix, uint64_t seed,
                                         const std::function<void(int64_t, int64_t)>& progress);

struct ArchInfo {
  std::string_view gguf_name;                // general.architecture; "" if none
  std::vector<std::string_view> hf_classes;  // config.json architectures[0] Pagoda reads as this entry
  std::vector<std::string_view> hf_model_types;  // config.json model_type (kvcalc)
  std::optional<Arch> arch;                  // what Pagoda runs it as; nullopt: kvcalc only

  // Runnable families.
  kernels::RopeStyle gguf_rope = kernels::RopeStyle::kAdjacentPairs;  // pair order of GGUF Q/K rows
  bool qkv_bias = false;         // q/k/v projection biases
  bool qk_norm = false;          // RMSNorm over each q and k head before RoPE
  bool yarn = false;             // accepts YaRN rope scaling
  bool mla = false;              // multi-head latent attention (kv_lora_rank)
  bool moe = false;              // mixture-of-experts FFN ({arch}.expert_count, _used_count, ffn_*_exps)
  bool convert_permutes_qk = false;  // `convert`: HF rotate_half rows -> GGUF adjacent pairs
  // config.json: sliding_window applies to every layer, use_sliding_window defaulting to true
  // (Mistral); the other families refuse use_sliding_window.
  bool hf_uniform_window = false;
  ReadGguf read_gguf = nullptr;        // family keys beyond the common ones (gemma3)
  WriteRandom write_random = nullptr;  // make-model for the family, where it has its own writer

  // kvcalc: every n-th layer global, the others sliding, when the file states no pattern (0: all global).
  int64_t default_sliding_pattern = 0;
  // kvcalc weight estimate of a dense gated-MLP config.json (false: no estimate).
  bool dense_estimate = false;
  bool four_norms = false;       // pre and post norms around attention and FFN (Gemma 2/3)
  bool tied_by_default = false;  // tie_word_embeddings absent means tied (Gemma)
};

const std::vector<ArchInfo>& architectures();
const ArchInfo* find_gguf(std::string_view gguf_name);
const ArchInfo* find_hf_class(std::string_view hf_class);
const ArchInfo* find_hf_model_type(std::string_view model_type);
const ArchInfo& info(Arch arch);  // the runnable entry of `arch`

// "llama, qwen2, qwen3, deepseek2, gemma3, qwen3moe": the GGUF names Pagoda runs.
std::string runnable_gguf_names();
// "LlamaForCausalLM, ...": the config.json classes Pagoda reads.
std::string runnable_hf_classes();

// The runnable entry of a GGUF file from its metadata alone (GgufFile::read_metadata_only), or
// why not: no general.architecture, or one Pagoda does not run (named, with the supported list).
Result<const ArchInfo*> check_runnable(const GgufFile& header);

}  // namespace arch
}  // namespace pagoda::model
