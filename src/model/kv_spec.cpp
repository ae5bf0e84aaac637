#include "model/kv_spec.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "model/arch/registry.h"
#include "model/format/gguf.h"
#include "model/model_config.h"

namespace pagoda::model {

namespace {

using nlohmann::json;

std::string str(int64_t v) { return std::to_string(v); }

// Canonical form: no window without a sliding layer, an empty pattern when every layer slides.
void normalize_windows(KvSpec& s) {
  if (s.sliding_window <= 0) {
    s.sliding_window = 0;
    s.layer_is_sliding.clear();
    return;
  }
  if (s.layer_is_sliding.empty()) return;
  size_t n = 0;
  for (bool b : s.layer_is_sliding) n += b ? 1 : 0;
  if (n == 0) {
    s.sliding_window = 0;
    s.layer_is_sliding.clear();
  } else if (n == s.layer_is_sliding.size()) {
    s.layer_is_sliding.clear();
  }
}

Status check_shape(const KvSpec& s) {
  if (s.n_layer < 1 || s.n_layer > 4096 || s.n_head < 1 || s.n_head > 4096) {
    return Status::error("implausible shape: " + str(s.n_layer) + " layers, " + str(s.n_head) + " heads");
  }
  if (s.kv_lora_rank > 0) {
    if (s.qk_rope_head_dim < 0 || s.kv_lora_rank > 65536 || s.qk_rope_head_dim > 65536) {
      return Status::error("implausible MLA shape: kv_lora_rank " + str(s.kv_lora_rank) + ", rope dims " +
                           str(s.qk_rope_head_dim));
    }
  } else if (s.n_kv_head < 1 || s.n_kv_head > 4096 || s.head_dim < 1 || s.head_dim > 65536) {
    return Status::error("implausible KV shape: " + str(s.n_kv_head) + " kv heads of " + str(s.head_dim) + " dims");
  }
  if (s.sliding_window < 0 || s.max_context < 0) return Status::error("negative sliding window or context");
  return Status::ok();
}

// ---------------------------------------------------------------- GGUF

// An integer key that may be stored per layer (an array): one value if all layers agree.
Result<std::optional<int64_t>> gguf_uniform_int(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::optional<int64_t>{};
  if (auto i = v->as_int()) return std::optional<int64_t>(*i);
  if (auto arr = v->to_int_array(); arr && !arr->empty()) {
    for (int64_t x : *arr) {
      if (x != arr->front()) return Status::error("'" + key + "' differs between layers, which kvcalc does not support");
    }
    return std::optional<int64_t>(arr->front());
  }
  return Status::error("metadata key '" + key + "' is not an integer");
}


}  // namespace

Result<KvSpec> kv_spec_from_gguf(const GgufFile& f) {
  KvSpec s;
  s.format = "GGUF";
  auto arch = f.get_string("general.architecture");
  if (!arch.has_value()) return Status::error("missing metadata key 'general.architecture'");
  s.architecture = *arch;
  s.name = f.get_string("general.name").value_or("");
  const std::string p = *arch + ".";
  PAGODA_ASSIGN_OR_RETURN(auto kv_heads, gguf_uniform_int(f, p + "attention.head_count_kv"));
  if (const arch::ArchInfo* a = arch::find_gguf(*arch); a != nullptr && a->arch && !a->mla) {  // runnable: validated
    PAGODA_ASSIGN_OR_RETURN(ModelConfig c, config_from_gguf(f));
    s.n_layer = c.n_layer;
    s.n_head = c.n_head;
    s.n_kv_head = kv_heads.value_or(c.n_kv_head);
    s.head_dim = c.head_dim;
  } else {
    auto layers = f.get_int(p + "block_count");
    auto heads = f.get_int(p + "attention.head_count");
    if (!layers || !heads) {
      return Status::error("missing metadata key '" + p + (layers ? "attention.head_count" : "block_count") + "'");
    }
    s.n_layer = *layers;
    s.n_head = *heads;
    s.n_kv_head = kv_heads.value_or(*heads);
    auto key_length = f.get_int(p + "attention.key_length");
    auto width = f.get_int(p + "embedding_length");
    if (!key_length && !width) return Status::error("missing metadata keys '" + p + "attention.key_length' and '" + p + "embedding_length'");
    s.head_dim = key_length ? *key_length : (*heads > 0 ? *width / *heads : 0);
  }
  if (auto rank = f.get_int(p + "attention.kv_lora_rank"); rank && *rank > 0) {
    auto rope = f.get_int(p + "rope.dimension_count");
    if (!rope) return Status::error("MLA model without '" + p + "rope.dimension_count'");
    s.kv_lora_rank = *rank;
    s.qk_rope_head_dim = *rope;
  }
  s.max_context = f.get_int(p + "context_length").value_or(0);
  if (const GgufValue* v = f.find(p + "attention.kv_source_layer")) {
    auto sources = v->to_int_array();
    if (!sources || static_cast<int64_t>(sources->size()) != s.n_layer) {
      return Status::error("'" + p + "attention.kv_source_layer' must list one source layer per layer");
    }
    for (int64_t l = 0; l < s.n_layer; ++l) s.n_kv_layers += (*sources)[l] == l ? 1 : 0;
  }
  s.sliding_window = f.get_int(p + "attention.sliding_window").value_or(0);
  PAGODA_RETURN_IF_ERROR(check_shape(s));
  if (s.sliding_window > 0) {
    PAGODA_ASSIGN_OR_RETURN(s.layer_is_sliding, gguf_sliding_layers(f, *arch, s.n_layer));
  }
  normalize_windows(s);
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) total += t.bytes;
  s.weight_bytes = static_cast<int64_t>(total);
  s.weight_source = "tensor bytes";
  s.n_expert = f.get_int(p + "expert_count").value_or(0);
  s.n_expert_used = f.get_int(p + "expert_used_count").value_or(0);
  if (s.n_expert > 0 && s.n_expert_used > 0 && s.n_expert_used <= s.n_expert) {
    s.active_weight_bytes = moe_active_bytes(f, s.n_expert, s.n_expert_used);
  }
  return s;
}

int64_t moe_active_bytes(const GgufFile& f, int64_t n_expert, int64_t n_expert_used) {
  uint64_t total = 0, experts = 0, embedding = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    total += t.bytes;
    if (t.name.find("_exps.") != std::string::npos) experts += t.bytes;
    if (t.name == "token_embd.weight") embedding = t.bytes;
  }
  if (experts == 0 || n_expert <= 0) return 0;
  const bool tied = f.find_tensor("output.weight") == nullptr;
  return static_cast<int64_t>(total - experts - (tied ? 0 : embedding) +
                              experts / static_cast<uint64_t>(n_expert) * static_cast<uint64_t>(n_expert_used));
}

// ---------------------------------------------------------------- config.json

namespace {

// Absent or null: nullopt. An integral number: its value. Anything else: an error naming the key.
Result<std::optional<int64_t>> json_int(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::optional<int64_t>{};
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX)) return std::optional<int64_t>(static_cast<int64_t>(u));
  } else if (it->is_number_integer()) {
    return std::optional<int64_t>(it->get<int64_t>());
  } else if (it->is_number_float()) {
    const double d = it->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return std::optional<int64_t>(static_cast<int64_t>(d));
  }
  return Status::error(std::string("'") + key + "' must be an integer, got " + it->dump());
}

Result<int64_t> json_require_int(const json& cfg, const char* key) {
  PAGODA_ASSIGN_OR_RETURN(auto v, json_int(cfg, key));
  if (!v) return Status::error(std::string("missing '") + key + "' (is this a Hugging Face config.json of a decoder-only model?)");
  return *v;
}

Result<std::optional<bool>> json_bool(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::optional<bool>{};
  if (!it->is_boolean()) return Status::error(std::string("'") + key + "' must be true or false, got " + it->dump());
  return std::optional<bool>(it->get<bool>());
}

std::string json_string(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The sliding window and which layers use it (see the header for the order of the rules).
Status read_windows(const json& cfg, KvSpec& s) {
  PAGODA_ASSIGN_OR_RETURN(auto window, json_int(cfg, "sliding_window"));
  PAGODA_ASSIGN_OR_RETURN(auto use_window, json_bool(cfg, "use_sliding_window"));
  s.sliding_window = window.value_or(0);
  if (use_window == false) s.sliding_window = 0;
  if (s.sliding_window <= 0) return Status::ok();
  if (auto it = cfg.find("layer_types"); it != cfg.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int64_t>(it->size()) != s.n_layer) {
      return Status::error("'layer_types' must list one type per layer (" + str(s.n_layer) + ")");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      if (t == "sliding_attention") s.layer_is_sliding.push_back(true);
      else if (t == "full_attention") s.layer_is_sliding.push_back(false);
      else return Status::error("layer " + str(static_cast<int64_t>(i)) + " has layer type " + t.dump() +
                                "; kvcalc knows full_attention and sliding_attention");
    }
    return Status::ok();
  }
  if (use_window == true) {
    PAGODA_ASSIGN_OR_RETURN(auto max_window_layers, json_int(cfg, "max_window_layers"));
    if (max_window_layers) {
      for (int64_t i = 0; i < s.n_layer; ++i) s.layer_is_sliding.push_back(i >= *max_window_layers);
    }
    return Status::ok();
  }
  PAGODA_ASSIGN_OR_RETURN(auto pattern, json_int(cfg, "sliding_window_pattern"));
  if (const arch::ArchInfo* a = arch::find_hf_model_type(s.architecture);
      !pattern && a != nullptr && a->default_sliding_pattern > 0) {
    pattern = a->default_sliding_pattern;
  }
  if (pattern) {
    if (*pattern < 1) return Status::error("'sliding_window_pattern' must be positive");
    s.layer_is_sliding = sliding_pattern(s.n_layer, *pattern);
  }
  return Status::ok();
}

// Parameters of a dense decoder with a gated MLP (Llama, Mistral, Qwen 2/3, Gemma 1/2/3): embeddings,
// q/k/v/o, gate/up/down, norms, biases, lm_head when untied. nullopt with `why` otherwise.
std::optional<int64_t> estimate_dense_params(const json& cfg, const KvSpec& s, std::string& why) {
  const arch::ArchInfo* a = arch::find_hf_model_type(s.architecture);
  if (a == nullptr || !a->dense_estimate) {
    why = "no estimate for model_type '" + s.architecture + "'";
    return std::nullopt;
  }
  for (const char* moe : {"num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"}) {
    if (cfg.contains(moe) && !cfg[moe].is_null()) {
      why = "no estimate for a mixture-of-experts config";
      return std::nullopt;
    }
  }
  auto vocab = json_int(cfg, "vocab_size");
  auto hidden = json_int(cfg, "hidden_size");
  auto inter = json_int(cfg, "intermediate_size");
  if (!vocab.is_ok() || !hidden.is_ok() || !inter.is_ok() || !*vocab || !*hidden || !*inter) {
    why = "vocab_size, hidden_size or intermediate_size missing";
    return std::nullopt;
  }
  const int64_t V = **vocab, H = **hidden, I = **inter;
  const int64_t q = s.n_head * s.head_dim, kv = s.n_kv_head * s.head_dim;
  auto tie = json_bool(cfg, "tie_word_embeddings");
  const bool tied = tie.is_ok() && tie->has_value() ? **tie : a->tied_by_default;
  auto attention_bias = json_bool(cfg, "attention_bias");
  const bool o_bias = attention_bias.is_ok() && *attention_bias == true;
  const bool qkv_bias = o_bias || a->qkv_bias;
  int64_t layer = H * q + 2 * H * kv + q * H + 3 * H * I;
  layer += (qkv_bias ? q + 2 * kv : 0) + (o_bias ? H : 0);
  layer += a->qk_norm ? 2 * s.head_dim : 0;  // q/k norms
  layer += a->four_norms ? 4 * H : 2 * H;    // norms
  return V * H * (tied ? 1 : 2) + s.n_layer * layer + H;
}

void estimate_weights(const json& top, const json& cfg, KvSpec& s) {
  if (top.contains("quantization_config")) {
    s.weight_source = "no estimate for quantized weights (quantization_config)";
    return;
  }
  std::string dtype = json_string(top, "torch_dtype");
  if (dtype.empty()) dtype = json_string(top, "dtype");
  if (dtype.empty()) dtype = json_string(cfg, "torch_dtype");
  const int64_t elem = dtype == "float32" ? 4 : (dtype == "bfloat16" || dtype == "float16") ? 2 : 0;
  if (elem == 0) {
    s.weight_source = dtype.empty() ? "no estimate: config states no torch_dtype" : "no estimate for torch_dtype '" + dtype + "'";
    return;
  }
  std::string why;
  std::optional<int64_t> params = estimate_dense_params(cfg, s, why);
  if (!params) {
    s.weight_source = why;
    return;
  }
  s.weight_bytes = *params * elem;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "estimated: %.2fB parameters x %s", static_cast<double>(*params) / 1e9, dtype.c_str());
  s.weight_source = buf;
}

Result<KvSpec> spec_from_json(const json& top, const std::string& fallback_name) {
  if (!top.is_object()) return Status::error("config.json must hold a JSON object");
  const json* cfg = &top;
  if (auto it = top.find("text_config"); it != top.end() && it->is_object() && !top.contains("num_hidden_layers")) {
    cfg = &*it;  // multimodal wrapper: the language model's shape
  }
  KvSpec s;
  s.format = "config.json";
  s.name = json_string(top, "_name_or_path");
  if (s.name.empty()) s.name = fallback_name;
  s.architecture = json_string(*cfg, "model_type");
  if (s.architecture.empty()) s.architecture = json_string(top, "model_type");
  PAGODA_ASSIGN_OR_RETURN(s.n_layer, json_require_int(*cfg, "num_hidden_layers"));
  PAGODA_ASSIGN_OR_RETURN(s.n_head, json_require_int(*cfg, "num_attention_heads"));
  PAGODA_ASSIGN_OR_RETURN(auto kv_heads, json_int(*cfg, "num_key_value_heads"));
  s.n_kv_head = kv_heads.value_or(s.n_head);
  PAGODA_ASSIGN_OR_RETURN(auto rank, json_int(*cfg, "kv_lora_rank"));
  if (rank.value_or(0) > 0) {
    s.kv_lora_rank = *rank;
    PAGODA_ASSIGN_OR_RETURN(s.qk_rope_head_dim, json_require_int(*cfg, "qk_rope_head_dim"));
  }
  PAGODA_ASSIGN_OR_RETURN(auto head_dim, json_int(*cfg, "head_dim"));
  PAGODA_ASSIGN_OR_RETURN(auto hidden, json_int(*cfg, "hidden_size"));
  if (head_dim) {
    s.head_dim = *head_dim;
  } else if (hidden && s.n_head > 0) {
    s.head_dim = *hidden / s.n_head;
  } else if (s.kv_lora_rank == 0) {
    return Status::error("neither 'head_dim' nor 'hidden_size' given: cannot tell the head size");
  }
  PAGODA_ASSIGN_OR_RETURN(auto context, json_int(*cfg, "max_position_embeddings"));
  s.max_context = context.value_or(0);
  PAGODA_RETURN_IF_ERROR(check_shape(s));
  PAGODA_RETURN_IF_ERROR(read_windows(*cfg, s));
  normalize_windows(s);
  estimate_weights(top, *cfg, s);
  return s;
}

}  // namespace

Result<KvSpec> kv_spec_from_hf_config(std::string_view json_text, const std::string& fallback_name) {
  json top = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded()) return Status::error("not valid JSON (expected a Hugging Face config.json)");
  return spec_from_json(top, fallback_name);
}

Result<KvSpec> read_kv_spec(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::error(file + ": cannot open (no such file, or not readable)");
  char magic[4] = {};
  in.read(magic, 4);
  const std::string stem = fs::path(file).stem().string();
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    PAGODA_ASSIGN_OR_RETURN(GgufFile f, GgufFile::read_metadata_only(file));
    auto spec = kv_spec_from_gguf(f);
    if (!spec.is_ok()) return spec.status().with_context(file);
    if (spec->name.empty()) spec->name = stem;
    return spec;
  }
  in.clear();
  in.seekg(0);
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > (size_t{64} << 20)) return Status::error(file + ": too large for a config.json");
  const std::string fallback = stem == "config" ? fs::path(file).parent_path().filename().string() : stem;
  auto spec = kv_spec_from_hf_config(text.str(), fallback.empty() ? stem : fallback);
  if (!spec.is_ok()) return spec.status().with_context(file);
  return spec;
}

}  // namespace pagoda::model
