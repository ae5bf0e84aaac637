#include "kvcache/kv_planner.h"

#include <algorithm>
#include <cctype>

#include "kvcache/kv_layout.h"

namespace pagoda::kvcache {

namespace {

constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxRowWidth = 65536;
constexpr int64_t kMaxBlockSize = 4096;

std::string str(int64_t v) { return std::to_string(v); }

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// a * b + c * d, or an error when it does not fit in int64.
Result<int64_t> checked_dot(int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t ab = 0, cd = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(c, d, &cd) ||
      __builtin_add_overflow(ab, cd, &sum)) {
    return Status::error("KV size overflows 64 bits: lower the context or block size");
  }
  return sum;
}

// Bytes of one layer's block (K, plus V unless MLA) of `block_size` tokens.
int64_t layer_block_bytes(const KvModelSpec& spec, kernels::KvDType dtype, int64_t block_size) {
  const int64_t hd = spec.cache_head_dim();
  const int64_t heads = spec.cache_n_kv_head();
  int64_t bytes = kernels::kv_block_bytes_k(dtype, hd, block_size, heads);
  if (!spec.is_mla()) bytes += kernels::kv_block_bytes_v(dtype, hd, block_size, heads);
  return bytes;
}

Status validate_options(const KvPlanOptions& o) {
  if (o.block_size < 1 || o.block_size > kMaxBlockSize) {
    return Status::error("block size must be in [1, " + str(kMaxBlockSize) + "], got " + str(o.block_size));
  }
  if (o.mem_bytes < 0) return Status::error("memory budget must not be negative");
  if (o.weight_bytes.has_value() && *o.weight_bytes < 0) return Status::error("weight bytes must not be negative");
  if (o.overhead_bytes.has_value() && *o.overhead_bytes < 0) return Status::error("overhead must not be negative");
  if (o.context < 0) return Status::error("context must not be negative, got " + str(o.context));
  if (o.int4_stage_slots < 1 || o.int4_stage_slots > 4096) {
    return Status::error("int4 stage slots must be in [1, 4096], got " + str(o.int4_stage_slots));
  }
  return Status::ok();
}

// Fills the budget fields of `plan`; an error when nothing is left for KV.
Status plan_budget(const KvModelSpec& spec, const KvPlanOptions& o, CapacityPlan& plan) {
  plan.mem_bytes = o.mem_bytes;
  plan.weight_bytes = o.weight_bytes.value_or(spec.weight_bytes);
  plan.overhead_bytes = o.overhead_bytes.value_or(o.mem_bytes / 100 * kDefaultOverheadPercent +
                                                   o.mem_bytes % 100 * kDefaultOverheadPercent / 100);
  plan.available_bytes = o.mem_bytes - plan.weight_bytes - plan.overhead_bytes;
  if (plan.available_bytes <= 0) {
    return Status::error("no memory left for the KV cache: " + format_bytes(o.mem_bytes) + " - weights " +
                         format_bytes(plan.weight_bytes) + " - overhead " + format_bytes(plan.overhead_bytes) +
                         " = " + format_bytes(plan.available_bytes) + "; raise the memory or lower the weights/overhead");
  }
  return Status::ok();
}

}  // namespace

std::string_view KvModelSpec::attention_kind() const {
  if (is_mla()) return "MLA";
  if (n_kv_head == n_head) return "MHA";
  if (n_kv_head == 1) return "MQA";
  return "GQA";
}

int64_t KvModelSpec::num_sliding_layers() const {
  if (sliding_window <= 0) return 0;
  if (layer_is_sliding.empty()) return n_layer;
  int64_t n = 0;
  for (bool s : layer_is_sliding) n += s ? 1 : 0;
  return n;
}

Status KvModelSpec::validate() const {
  const std::string who = name.empty() ? "model" : name;
  if (n_layer < 1 || n_layer > kMaxLayers) return Status::error(who + ": layer count " + str(n_layer) + " is not in [1, 4096]");
  if (n_head < 1 || n_head > kMaxHeads) return Status::error(who + ": query head count " + str(n_head) + " is not in [1, 4096]");
  if (is_mla()) {
    if (kv_lora_rank > kMaxRowWidth || qk_rope_head_dim < 0 || qk_rope_head_dim > kMaxRowWidth) {
      return Status::error(who + ": implausible MLA shape (kv_lora_rank " + str(kv_lora_rank) + ", qk_rope_head_dim " +
                           str(qk_rope_head_dim) + ")");
    }
  } else {
    if (kv_lora_rank < 0) return Status::error(who + ": negative kv_lora_rank");
    if (n_kv_head < 1 || n_kv_head > kMaxHeads) return Status::error(who + ": kv head count " + str(n_kv_head) + " is not in [1, 4096]");
    if (head_dim < 1 || head_dim > kMaxRowWidth) return Status::error(who + ": head dim " + str(head_dim) + " is not in [1, 65536]");
  }
  if (sliding_window < 0) return Status::error(who + ": negative sliding window");
  if (!layer_is_sliding.empty()) {
    if (static_cast<int64_t>(layer_is_sliding.size()) != n_layer) {
      return Status::error(who + ": sliding-layer pattern has " + str(static_cast<int64_t>(layer_is_sliding.size())) +
                           " entries for " + str(n_layer) + " layers");
    }
    if (sliding_window == 0) {
      for (bool s : layer_is_sliding) {
        if (s) return Status::error(who + ": layers marked sliding but no sliding window size");
      }
    }
  }
  if (max_context < 0 || weight_bytes < 0) return Status::error(who + ": negative context or weight size");
  if (n_kv_layers < 0 || n_kv_layers > n_layer) {
    return Status::error(who + ": " + str(n_kv_layers) + " layers owning K/V of " + str(n_layer));
  }
  if (n_kv_layers > 0 && n_kv_layers < n_layer && num_sliding_layers() > 0 && num_sliding_layers() < n_layer) {
    return Status::error(who + ": cross-layer KV sharing with a per-layer sliding pattern is not planned");
  }
  return Status::ok();
}

std::vector<kernels::KvDType> all_kv_dtypes() {
  using D = kernels::KvDType;
  return {D::kF32, D::kF16, D::kBF16, D::kFp8E4M3, D::kFp8E5M2, D::kInt8, D::kInt4};
}

Status check_kv_dtype(const KvModelSpec& spec, kernels::KvDType dtype) {
  if (dtype == kernels::KvDType::kInt4 && spec.cache_head_dim() % 2 != 0) {
    return Status::error("int4 KV needs an even row width; " + (spec.name.empty() ? std::string("this model") : spec.name) +
                         " caches rows of " + str(spec.cache_head_dim()));
  }
  return Status::ok();
}

Result<CapacityPlan> plan_capacity(const KvModelSpec& spec, const KvPlanOptions& options,
                                   const std::vector<kernels::KvDType>& dtypes) {
  PAGODA_RETURN_IF_ERROR(spec.validate());
  PAGODA_RETURN_IF_ERROR(validate_options(options));
  if (dtypes.empty()) return Status::error("no KV dtypes to plan for");
  for (kernels::KvDType d : dtypes) PAGODA_RETURN_IF_ERROR(check_kv_dtype(spec, d));

  CapacityPlan plan;
  const int64_t bs = options.block_size;
  plan.block_size = bs;
  plan.context = options.context > 0 ? options.context : spec.max_context > 0 ? spec.max_context : kDefaultPlanContext;
  const int64_t n_sliding = spec.num_sliding_layers();
  const int64_t n_full = spec.kv_layers() - n_sliding;
  plan.window_tokens = n_sliding > 0 ? std::min(plan.context, spec.sliding_window) : 0;
  if (options.mem_bytes > 0) PAGODA_RETURN_IF_ERROR(plan_budget(spec, options, plan));

  const int64_t full_blocks = ceil_div(plan.context, bs);
  // The last W tokens span ceil((W - 1) / B) + 1 blocks at worst; never more than the context's.
  const int64_t window_blocks =
      n_sliding > 0 ? std::min(full_blocks, ceil_div(spec.sliding_window - 1, bs) + 1) : 0;
  for (kernels::KvDType dtype : dtypes) {
    KvPlanRow row;
    row.dtype = dtype;
    const int64_t layer_bytes = layer_block_bytes(spec, dtype, bs);
    row.full_bytes_per_block = n_full * layer_bytes;
    row.sliding_bytes_per_block = n_sliding * layer_bytes;
    row.bytes_per_block = row.full_bytes_per_block + row.sliding_bytes_per_block;
    row.bytes_per_token = static_cast<double>(row.bytes_per_block) / static_cast<double>(bs);
    row.full_blocks_per_sequence = full_blocks;
    row.sliding_blocks_per_sequence = window_blocks;
    PAGODA_ASSIGN_OR_RETURN(row.bytes_per_sequence, checked_dot(row.full_bytes_per_block, full_blocks,
                                                                row.sliding_bytes_per_block, window_blocks));
    // The staging the engine's pool reserves (0 unless int4), from the layout it sizes with.
    KvLayout layout;
    layout.n_layer = spec.kv_layers();
    layout.n_kv_head = spec.cache_n_kv_head();
    layout.head_dim = spec.cache_head_dim();
    layout.block_size = bs;
    layout.dtype = dtype;
    layout.stage_slots = options.int4_stage_slots;
    row.stage_bytes = layout.stage_bytes();
    if (options.mem_bytes > 0) {
      const int64_t kv_bytes = std::max<int64_t>(0, plan.available_bytes - row.stage_bytes);
      row.has_capacity = true;
      row.num_blocks = kv_bytes / row.bytes_per_block;
      row.max_cached_tokens = row.num_blocks * bs;
      row.max_sequences = kv_bytes / row.bytes_per_sequence;
    }
    plan.rows.push_back(row);
  }
  return plan;
}

// ---- presets ----

namespace {

// A GQA/MHA model whose every layer attends to the whole context.
KvModelSpec dense(std::string name, int64_t n_layer, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                  int64_t max_context, int64_t params) {
  KvModelSpec s;
  s.name = std::move(name);
  s.n_layer = n_layer;
  s.n_head = n_head;
  s.n_kv_head = n_kv_head;
  s.head_dim = head_dim;
  s.max_context = max_context;
  s.weight_bytes = params * 2;  // f16 / bf16 weights
  return s;
}

}  // namespace

std::vector<KvModelSpec> kv_model_presets() {
  // From each model's published Hugging Face config.json; params counted from the same config
  // (embeddings, attention, MLP, norms, biases; lm_head when untied).
  std::vector<KvModelSpec> p;
  p.push_back(dense("llama-2-7b", 32, 32, 32, 128, 4096, 6'738'415'616));
  p.push_back(dense("llama-2-13b", 40, 40, 40, 128, 4096, 13'015'864'320));
  p.push_back(dense("llama-2-70b", 80, 64, 8, 128, 4096, 68'976'648'192));  // GQA: k_proj 8192 -> 1024
  p.push_back(dense("llama-3-8b", 32, 32, 8, 128, 8192, 8'030'261'248));
  p.push_back(dense("llama-3-70b", 80, 64, 8, 128, 8192, 70'553'706'496));
  p.push_back(dense("llama-3.1-8b", 32, 32, 8, 128, 131072, 8'030'261'248));
  KvModelSpec mistral = dense("mistral-7b", 32, 32, 8, 128, 32768, 7'241'732'096);  // v0.1
  mistral.sliding_window = 4096;  // every layer
  p.push_back(mistral);
  p.push_back(dense("qwen2.5-7b", 28, 28, 4, 128, 32768, 7'615'616'512));  // Instruct config
  // Gemma 2 9B: layers 0, 2, 4, ... use a 4096-token window, odd layers the full context.
  KvModelSpec gemma = dense("gemma-2-9b", 42, 16, 8, 256, 8192, 9'241'705'984);
  gemma.sliding_window = 4096;
  for (int64_t i = 0; i < gemma.n_layer; ++i) gemma.layer_is_sliding.push_back(i % 2 == 0);
  p.push_back(gemma);
  // DeepSeek-V3: MLA, 671B parameters in the main model (without the 11.5B MTP module).
  KvModelSpec ds = dense("deepseek-v3", 61, 128, 128, 128, 163840, 671'026'419'200);
  ds.kv_lora_rank = 512;
  ds.qk_rope_head_dim = 64;
  p.push_back(ds);
  return p;
}

std::optional<KvModelSpec> find_kv_model_preset(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (KvModelSpec& s : kv_model_presets()) {
    if (s.name == lower) return std::move(s);
  }
  return std::nullopt;
}

}  // namespace pagoda::kvcache
