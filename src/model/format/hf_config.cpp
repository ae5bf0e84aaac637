#include "model/format/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/arch/gemma3.h"
#include "model/arch/registry.h"

namespace pagoda::model {

namespace {

using nlohmann::json;

// A present, non-null value of `key`, or nullptr.
const json* get(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

Result<int64_t> get_int(const json& j, const char* key, std::optional<int64_t> fallback) {
  const json* v = get(j, key);
  if (v == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Status::invalid_argument(std::string("missing '") + key + "'");
  }
  if (!v->is_number_integer()) return Status::invalid_argument(std::string("'") + key + "' is not an integer");
  return v->get<int64_t>();
}

Result<double> get_float(const json& j, const char* key, std::optional<double> fallback) {
  const json* v = get(j, key);
  if (v == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Status::invalid_argument(std::string("missing '") + key + "'");
  }
  if (!v->is_number()) return Status::invalid_argument(std::string("'") + key + "' is not a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return Status::invalid_argument(std::string("'") + key + "' is not finite");
  return d;
}

Result<bool> get_bool(const json& j, const char* key, bool fallback) {
  const json* v = get(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return Status::invalid_argument(std::string("'") + key + "' is not true or false");
  return v->get<bool>();
}

Status read_rope_scaling(const json& j, ModelConfig& c) {
  const json* s = get(j, "rope_scaling");
  if (s == nullptr) return Status::ok();
  if (!s->is_object()) return Status::invalid_argument("'rope_scaling' is not an object");
  const json* type = get(*s, "rope_type");
  if (type == nullptr) type = get(*s, "type");
  if (type == nullptr || !type->is_string()) return Status::invalid_argument("'rope_scaling' has no rope_type");
  const std::string t = type->get<std::string>();
  if (t == "default") return Status::ok();
  PAGODA_ASSIGN_OR_RETURN(double factor, get_float(*s, "factor", std::nullopt));
  if (!(factor > 0)) return Status::invalid_argument("rope_scaling factor must be positive");
  if (t == "linear") {
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
    return Status::ok();
  }
  if (t == "llama3") {
    Llama3RopeScaling l3;
    l3.factor = factor;
    PAGODA_ASSIGN_OR_RETURN(l3.low_freq_factor, get_float(*s, "low_freq_factor", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(l3.high_freq_factor, get_float(*s, "high_freq_factor", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(l3.original_context, get_float(*s, "original_max_position_embeddings", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(c.rope.freq_factors, llama3_freq_factors(l3, c.rope.freq_base, c.rope.rot_dim));
    return Status::ok();
  }
  return Status::invalid_argument("unsupported rope_scaling type '" + t + "' (supported: linear, llama3)");
}

// Gemma 3's own keys (Gemma3ForCausalLM, model_type gemma3_text): sliding_window (null:
// none), which layers slide from layer_types ("sliding_attention" / "full_attention") or
// sliding_window_pattern (layer i slides unless (i + 1) % n == 0; default 6), rope_local_base_freq
// (default 10000; the global layers keep rope_theta and rope_scaling), final_logit_softcapping
// (null: none), query_pre_attn_scalar (must be the width llama.cpp scales by), no
// attn_logit_softcapping.
Status read_gemma3_hf(const json& j, ModelConfig& c) {
  PAGODA_ASSIGN_OR_RETURN(int64_t window, get_int(j, "sliding_window", 0));
  if (window < 0) return Status::invalid_argument("negative sliding_window");
  std::vector<bool> sliding;
  if (const json* types = get(j, "layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.n_layer) {
      return Status::invalid_argument("'layer_types' is not a list of num_hidden_layers entries");
    }
    for (const json& t : *types) {
      if (t != "sliding_attention" && t != "full_attention") {
        return Status::invalid_argument("layer type " + t.dump() + " (supported: sliding_attention, full_attention)");
      }
      sliding.push_back(t == "sliding_attention");
    }
  } else {
    PAGODA_ASSIGN_OR_RETURN(int64_t pattern, get_int(j, "sliding_window_pattern", 6));
    if (pattern < 1) return Status::invalid_argument("sliding_window_pattern must be >= 1");
    sliding = sliding_pattern(c.n_layer, pattern);
  }
  if (get(j, "attn_logit_softcapping") != nullptr) {
    return Status::invalid_argument("attn_logit_softcapping (Gemma 2's attention soft-cap) is not supported");
  }
  PAGODA_ASSIGN_OR_RETURN(double base_swa, get_float(j, "rope_local_base_freq", 10000.0));
  PAGODA_ASSIGN_OR_RETURN(double softcap, get_float(j, "final_logit_softcapping", 0.0));
  PAGODA_RETURN_IF_ERROR(arch::finish_gemma3_config(c, window, sliding, base_swa, softcap));
  PAGODA_ASSIGN_OR_RETURN(double scalar, get_float(j, "query_pre_attn_scalar", static_cast<double>(arch::gemma3_attn_scale_width(c))));
  if (scalar != static_cast<double>(arch::gemma3_attn_scale_width(c))) {
    return Status::invalid_argument("query_pre_attn_scalar " + std::to_string(scalar) + " is not " +
                                    std::to_string(arch::gemma3_attn_scale_width(c)) + ", the width llama.cpp and Pagoda scale by");
  }
  return Status::ok();
}

// Qwen3-MoE's keys (Qwen3MoeForCausalLM): num_experts, num_experts_per_tok,
// moe_intermediate_size; every layer sparse (decoder_sparse_step 1, no mlp_only_layers) and
// the top-k weights renormalized (norm_topk_prob true), the routing model/moe.h runs.
Status read_moe_hf(const json& j, ModelConfig& c) {
  PAGODA_ASSIGN_OR_RETURN(c.n_expert, get_int(j, "num_experts", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_expert_used, get_int(j, "num_experts_per_tok", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_ff_exp, get_int(j, "moe_intermediate_size", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(bool norm_topk, get_bool(j, "norm_topk_prob", false));
  if (!norm_topk) return Status::invalid_argument("norm_topk_prob false (top-k weights not renormalized) is not supported");
  PAGODA_ASSIGN_OR_RETURN(int64_t step, get_int(j, "decoder_sparse_step", 1));
  if (step != 1) return Status::invalid_argument("decoder_sparse_step " + std::to_string(step) + " (dense layers between MoE ones) is not supported");
  if (const json* dense = get(j, "mlp_only_layers"); dense != nullptr && !(dense->is_array() && dense->empty())) {
    return Status::invalid_argument("mlp_only_layers (dense layers between MoE ones) is not supported");
  }
  return Status::ok();
}

Result<HfConfig> parse(const json& j) {
  if (!j.is_object()) return Status::invalid_argument("not a JSON object");
  HfConfig h;
  ModelConfig& c = h.model;
  const json* archs = get(j, "architectures");
  if (archs == nullptr || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return Status::invalid_argument("missing 'architectures'");
  }
  h.architecture = (*archs)[0].get<std::string>();
  c.rope.style = kernels::RopeStyle::kNeoxHalves;  // rotate_half
  PAGODA_ASSIGN_OR_RETURN(bool attention_bias, get_bool(j, "attention_bias", false));
  if (attention_bias) return Status::invalid_argument("attention_bias (q/k/v/o projection biases) is not supported");
  const arch::ArchInfo* a = arch::find_hf_class(h.architecture);
  if (a == nullptr || !a->arch) {
    return Status::invalid_argument("unsupported architecture '" + h.architecture +
                                    "' (supported: " + arch::runnable_hf_classes() + ")");
  }
  c.arch = *a->arch;
  c.arch_name = std::string(a->gguf_name);
  c.has_qkv_bias = a->qkv_bias;
  c.has_qk_norm = a->qk_norm;
  // Gemma: GeGLU with tanh GELU (hidden_activation, the older hidden_act); the others SwiGLU.
  const char* want_act = a->four_norms ? "gelu_pytorch_tanh" : "silu";
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (const json* act = get(j, key); act != nullptr && *act != want_act) {
      return Status::invalid_argument(std::string("unsupported ") + key + " " + act->dump() + " (supported: " + want_act + ")");
    }
  }
  PAGODA_ASSIGN_OR_RETURN(bool mlp_bias, get_bool(j, "mlp_bias", false));
  if (mlp_bias) return Status::invalid_argument("mlp_bias is not supported");
  PAGODA_ASSIGN_OR_RETURN(h.tie_word_embeddings, get_bool(j, "tie_word_embeddings", a->tied_by_default));
  PAGODA_ASSIGN_OR_RETURN(c.n_embd, get_int(j, "hidden_size", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_layer, get_int(j, "num_hidden_layers", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_head, get_int(j, "num_attention_heads", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_kv_head, get_int(j, "num_key_value_heads", c.n_head));
  PAGODA_ASSIGN_OR_RETURN(c.n_ff, get_int(j, "intermediate_size", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_vocab, get_int(j, "vocab_size", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.n_ctx_train, get_int(j, "max_position_embeddings", 2048));
  if (c.n_head <= 0) return Status::invalid_argument("num_attention_heads must be positive");
  if (get(j, "head_dim") == nullptr && c.n_embd % c.n_head != 0) {
    return Status::invalid_argument("hidden_size is not a multiple of num_attention_heads and head_dim is absent");
  }
  PAGODA_ASSIGN_OR_RETURN(c.head_dim, get_int(j, "head_dim", c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 4096) {
    return Status::invalid_argument("bad head_dim " + std::to_string(c.head_dim));
  }
  PAGODA_ASSIGN_OR_RETURN(double eps, get_float(j, "rms_norm_eps", 1e-6));  // (Gemma's default too)
  c.rms_eps = static_cast<float>(eps);
  PAGODA_ASSIGN_OR_RETURN(double theta, get_float(j, "rope_theta", 10000.0));
  c.rope.freq_base = static_cast<float>(theta);
  c.rope.head_dim = c.head_dim;
  PAGODA_ASSIGN_OR_RETURN(double partial, get_float(j, "partial_rotary_factor", 1.0));
  c.rope.rot_dim = static_cast<int64_t>(std::llround(partial * static_cast<double>(c.head_dim)));
  if (!(partial > 0 && partial <= 1) || c.rope.rot_dim <= 0 || c.rope.rot_dim % 2 != 0) {
    return Status::invalid_argument("bad partial_rotary_factor " + std::to_string(partial));
  }
  if (!(c.rope.freq_base > 1)) return Status::invalid_argument("bad rope_theta");
  PAGODA_RETURN_IF_ERROR(read_rope_scaling(j, c));
  PAGODA_ASSIGN_OR_RETURN(bool use_sliding, get_bool(j, "use_sliding_window", a->hf_uniform_window));
  if (use_sliding) {
    if (!a->hf_uniform_window) {
      return Status::invalid_argument("use_sliding_window (per-layer windows) is not supported for " + h.architecture);
    }
    PAGODA_ASSIGN_OR_RETURN(c.sliding_window, get_int(j, "sliding_window", 0));  // null: none
    if (c.sliding_window < 0) return Status::invalid_argument("negative sliding_window");
  }
  if (a->arch == Arch::kGemma3) PAGODA_RETURN_IF_ERROR(read_gemma3_hf(j, c));
  if (a->moe) PAGODA_RETURN_IF_ERROR(read_moe_hf(j, c));
  PAGODA_RETURN_IF_ERROR(validate_config(c));
  return h;
}

}  // namespace

Result<HfConfig> config_from_hf_json(const std::string& json_text, const std::string& name) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument(name + ": not valid JSON");
  auto config = parse(j);
  if (!config.is_ok()) return config.status().with_context(name);
  return config;
}

}  // namespace pagoda::model
