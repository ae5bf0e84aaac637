#include "model/format/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

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
  if (const json* act = get(j, "hidden_act"); act != nullptr && *act != "silu") {
    return Status::invalid_argument("unsupported hidden_act " + act->dump() + " (supported: silu)");
  }
  PAGODA_ASSIGN_OR_RETURN(bool mlp_bias, get_bool(j, "mlp_bias", false));
  if (mlp_bias) return Status::invalid_argument("mlp_bias is not supported");
  PAGODA_ASSIGN_OR_RETURN(h.tie_word_embeddings, get_bool(j, "tie_word_embeddings", false));
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
  PAGODA_ASSIGN_OR_RETURN(double eps, get_float(j, "rms_norm_eps", 1e-6));
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
