// The KV capacity planner behind `pagoda kvcalc`: how many bytes one token, one block and one
// sequence of KV take for each KV element format, and how many tokens and concurrent
// sequences fit in a memory budget. It knows nothing of files: a KvModelSpec is filled from
// a preset here, or by tools/ from a GGUF or a Hugging Face config.json (model/kv_spec.h).
//
// Bytes come only from kernels/kv_format.h (kv_block_bytes_k/v), the functions the engine sizes
// its pool with, so the planner and the engine agree to the byte. Per layer and block of B tokens:
//   GQA/MQA/MHA:  kv_block_bytes_k(dtype, head_dim, B, n_kv_head) + kv_block_bytes_v(same)
//   MLA:          kv_block_bytes_k(dtype, kv_lora_rank + qk_rope_head_dim, B, 1)   (one latent
//                 row per token, no separate V: DeepSeek-V2/V3 cache c_kv and the rope key)
//
// Capacity, for a memory budget M (KvPlanOptions::mem_bytes):
//   available       = M - weights - overhead          (an error when <= 0)
//   stage           = int4 only: the engine's f32 staging of partial K blocks, a fixed cost
//                     (KvLayout::stage_bytes, int4_stage_slots slots per layer); 0 otherwise
//   num_blocks      = floor((available - stage) / bytes_per_block)   (block = all layers, K and V;
//                     with cross-layer sharing only the n_kv_layers that own K/V count)
//   max_cached_tokens = num_blocks x B                 ("full-attention view": every layer keeps
//                                                       every token, as the engine's pool does)
//   blocks of one sequence at context C, per layer group:
//     full-attention layers: ceil(C / B)
//     sliding layers (window W): min(ceil(C / B), ceil((W - 1) / B) + 1) — the last W tokens
//       straddle one more block than W / B unless they start on a block boundary (as vLLM counts)
//   bytes_per_sequence = full_bytes_per_block x full blocks + sliding_bytes_per_block x window blocks
//   max_sequences   = floor((available - stage) / bytes_per_sequence)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/kv_format.h"

namespace pagoda::kvcache {

// What decides the size of a model's KV cache. Every layer has the same K/V shape.
struct KvModelSpec {
  std::string name;
  int64_t n_layer = 0;
  int64_t n_head = 0;      // query heads: only for the MHA/GQA/MQA label
  int64_t n_kv_head = 0;   // K/V heads per layer (ignored for MLA)
  int64_t head_dim = 0;    // per K/V head (ignored for MLA)
  // MLA (DeepSeek-V2/V3): each layer caches one latent of kv_lora_rank + qk_rope_head_dim per
  // token. kv_lora_rank > 0 means MLA.
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  // Sliding windows: a layer with a window attends to (and caches) at most the last
  // `sliding_window` tokens. 0: none.
  int64_t sliding_window = 0;
  std::vector<bool> layer_is_sliding;  // [n_layer]; empty with a window > 0: every layer (Mistral)
  int64_t max_context = 0;   // trained / configured context, 0 if unknown
  int64_t weight_bytes = 0;  // model weights, 0 if unknown
  // Cross-layer KV sharing (CLA/YOCO): only this many layers own K/V blocks; 0: all n_layer.
  // Not combined with per-layer sliding windows (validate).
  int64_t n_kv_layers = 0;
  int64_t kv_layers() const { return n_kv_layers > 0 ? n_kv_layers : n_layer; }

  bool is_mla() const { return kv_lora_rank > 0; }
  // "MLA", "MHA" (kv heads == heads), "MQA" (1 kv head) or "GQA".
  std::string_view attention_kind() const;
  int64_t num_sliding_layers() const;  // layers that keep only the window
  // Width and head count of one cached K row as the kernels see it: (head_dim, n_kv_head),
  // or (kv_lora_rank + qk_rope_head_dim, 1) for MLA.
  int64_t cache_head_dim() const { return is_mla() ? kv_lora_rank + qk_rope_head_dim : head_dim; }
  int64_t cache_n_kv_head() const { return is_mla() ? 1 : n_kv_head; }
  // Positive, plausible sizes; layer_is_sliding of n_layer entries and only with a window.
  Status validate() const;
};

struct KvPlanOptions {
  int64_t block_size = 16;  // tokens per block, 1..4096
  int64_t mem_bytes = 0;    // memory budget for weights + KV + overhead; 0: sizes only, no capacity
  std::optional<int64_t> weight_bytes;    // unset: the spec's weight_bytes
  // Reserve for activations, workspaces and allocator slack. Unset: kDefaultOverheadPercent of
  // mem_bytes (vLLM leaves 10% of the GPU by default; 5% suits a CPU pool sized once).
  std::optional<int64_t> overhead_bytes;
  int64_t context = 0;      // tokens per sequence for max_sequences; 0: spec max_context, else 4096
  int64_t int4_stage_slots = 8;  // as KvLayout::stage_slots: f32 partial K blocks per layer (int4)
};
inline constexpr int64_t kDefaultOverheadPercent = 5;
inline constexpr int64_t kDefaultPlanContext = 4096;

struct KvPlanRow {
  kernels::KvDType dtype = kernels::KvDType::kF32;
  int64_t bytes_per_block = 0;          // all layers, K + V, block_size tokens (exact)
  double bytes_per_token = 0;           // bytes_per_block / block_size (integral for even splits)
  int64_t full_bytes_per_block = 0;     // the full-attention layers' share of bytes_per_block
  int64_t sliding_bytes_per_block = 0;  // the sliding-window layers' share
  int64_t full_blocks_per_sequence = 0;     // ceil(context / B): blocks of a full-attention layer
  int64_t sliding_blocks_per_sequence = 0;  // window-capped blocks of a sliding layer (0: none)
  int64_t bytes_per_sequence = 0;       // KV of one sequence at context (window-capped)
  int64_t stage_bytes = 0;              // int4: fixed staging cost taken from the budget first
  // Capacity: set only when KvPlanOptions::mem_bytes > 0.
  bool has_capacity = false;
  int64_t num_blocks = 0;               // floor(available / bytes_per_block)
  int64_t max_cached_tokens = 0;        // num_blocks x block_size
  int64_t max_sequences = 0;            // floor(available / bytes_per_sequence)
};

// Named CapacityPlan, not KvPlan: kvcache::KvPlan is BlockManager's per-step dry run.
struct CapacityPlan {
  int64_t block_size = 0;
  int64_t context = 0;          // the resolved context
  int64_t window_tokens = 0;    // min(context, sliding_window), 0 without a window
  // Budget (all 0 without mem_bytes).
  int64_t mem_bytes = 0;
  int64_t weight_bytes = 0;
  int64_t overhead_bytes = 0;
  int64_t available_bytes = 0;  // mem - weights - overhead, > 0
  std::vector<KvPlanRow> rows;  // one per requested dtype, in request order
};

// All seven formats, f32 first, in kernels::KvDType order.
std::vector<kernels::KvDType> all_kv_dtypes();

// ok when `dtype` can store this model's KV (int4 needs an even row width); else why not.
Status check_kv_dtype(const KvModelSpec& spec, kernels::KvDType dtype);

// One row per dtype. Errors: invalid spec or options, an unusable dtype (check_kv_dtype), a
// budget that leaves no room for KV ("24.0 GiB - weights 130.4 GiB - overhead ... <= 0").
Result<CapacityPlan> plan_capacity(const KvModelSpec& spec, const KvPlanOptions& options,
                                   const std::vector<kernels::KvDType>& dtypes);

// ---- presets: published configs of well-known models ----
// weight_bytes is the parameter count x 2 (f16/bf16 weights), approximate for MoE models.
std::vector<KvModelSpec> kv_model_presets();
std::optional<KvModelSpec> find_kv_model_preset(std::string_view name);  // exact, case-insensitive

}  // namespace pagoda::kvcache
