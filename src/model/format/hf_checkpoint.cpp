#include "model/format/hf_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/check.h"
#include "kernels/quant.h"
#include "model/arch/registry.h"

namespace pagoda::model {

namespace fs = std::filesystem;

namespace {

Result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// The shard files of model.safetensors.index.json: weight_map name -> file, every file a
// plain name inside the folder.
Result<std::map<std::string, std::vector<std::string>>> read_index(const fs::path& path) {
  PAGODA_ASSIGN_OR_RETURN(std::string text, read_text(path));
  const std::string name = path.string();
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(name + ": not a JSON object");
  auto map = j.find("weight_map");
  if (map == j.end() || !map->is_object() || map->empty()) return Status::invalid_argument(name + ": no 'weight_map' object");
  std::map<std::string, std::vector<std::string>> by_file;  // file -> tensor names
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string()) return Status::invalid_argument(name + ": weight_map entry '" + tensor + "' is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos) {
      return Status::invalid_argument(name + ": weight_map names '" + f + "', which is not a file name inside the folder");
    }
    by_file[f].push_back(tensor);
  }
  return by_file;
}

// A decimal index of 1..6 digits without a leading zero, then '.', taken off the front of n.
std::optional<std::string> take_index(std::string_view& n) {
  size_t digits = 0;
  while (digits < n.size() && digits < 6 && n[digits] >= '0' && n[digits] <= '9') ++digits;
  if (digits == 0 || digits >= n.size() || n[digits] != '.' || (digits > 1 && n[0] == '0')) return std::nullopt;
  std::string index(n.substr(0, digits));
  n.remove_prefix(digits + 1);
  return index;
}

}  // namespace

std::optional<std::string> gguf_name_from_hf(std::string_view n, bool four_norms) {
  static constexpr std::pair<std::string_view, std::string_view> kTop[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.norm.weight", "output_norm.weight"},
  };
  for (const auto& [hf, gguf] : kTop) {
    if (n == hf) return std::string(gguf);
  }
  constexpr std::string_view kLayers = "model.layers.";
  if (!n.starts_with(kLayers)) return std::nullopt;
  n.remove_prefix(kLayers.size());
  const std::optional<std::string> layer = take_index(n);
  if (!layer) return std::nullopt;
  static constexpr std::pair<std::string_view, std::string_view> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  // Gemma 2/3: post_attention_layernorm is the norm *after* attention (before the residual
  // add), pre/post_feedforward_layernorm wrap the FFN.
  static constexpr std::pair<std::string_view, std::string_view> kFourNorms[] = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
  };
  if (four_norms) {
    for (const auto& [hf, gguf] : kFourNorms) {
      if (n == hf) return "blk." + *layer + "." + std::string(gguf);
    }
  }
  for (const auto& [hf, gguf] : kLayer) {
    if (n == hf) return "blk." + *layer + "." + std::string(gguf);
  }
  // Mixture of experts (Qwen3-MoE): the router, and each expert's weights as
  // blk.N.ffn_{gate,up,down}_exps.E.weight (bind_experts reads them in place; convert stacks
  // them into llama.cpp's 3-D tensors).
  if (n == "mlp.gate.weight") return "blk." + *layer + ".ffn_gate_inp.weight";
  constexpr std::string_view kExperts = "mlp.experts.";
  if (n.starts_with(kExperts)) {
    n.remove_prefix(kExperts.size());
    const std::optional<std::string> expert = take_index(n);
    if (!expert) return std::nullopt;
    for (const auto& [hf, gguf] : {std::pair<std::string_view, std::string_view>{"gate_proj.weight", "ffn_gate_exps"},
                                   {"up_proj.weight", "ffn_up_exps"}, {"down_proj.weight", "ffn_down_exps"}}) {
      if (n == hf) return "blk." + *layer + "." + std::string(gguf) + "." + *expert + ".weight";
    }
  }
  return std::nullopt;
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

Status HfCheckpoint::add_file(SafetensorsFile file, const std::vector<std::string>* only) {
  std::set<std::string_view> wanted;
  if (only != nullptr) {
    for (const std::string& name : *only) {
      if (file.find(name) == nullptr) {
        return Status::invalid_argument(file.path() + ": has no tensor '" + name + "' (model.safetensors.index.json says it does)");
      }
      wanted.insert(name);
    }
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    if (only != nullptr && !wanted.contains(t.name)) continue;
    const arch::ArchInfo& family = arch::info(config_.model.arch);
    std::optional<std::string> name = gguf_name_from_hf(t.name, family.four_norms);
    if (!name.has_value()) {
      if (t.name.ends_with("rotary_emb.inv_freq")) continue;  // recomputed from config.json
      return Status::invalid_argument(file.path() + ": unexpected tensor '" + t.name +
                                      "' (not part of the architecture Pagoda runs; ignoring it would give wrong results)");
    }
    // Unique: names are JSON keys within a file, and the index gives each name one file.
    CHECK(!tensors_.contains(*name)) << t.name;
    TensorRef ref;
    ref.dims.assign(t.shape.rbegin(), t.shape.rend());
    ref.dtype = t.dtype;
    ref.type_name = t.dtype_name;
    ref.data = file.tensor_data(t);
    const size_t bytes = t.end - t.begin;
    const size_t elem = safetensors_dtype_size(t.dtype_name);
    if (family.four_norms && t.shape.size() == 1 && name->ends_with("norm.weight")) {
      // Gemma's RMSNorm scales by (1 + w): the weight as llama.cpp's converter stores it
      // (w + 1, in f32), which the forward pass uses as it is.
      if (!ref.dtype || (*ref.dtype != DType::kF32 && *ref.dtype != DType::kF16 && *ref.dtype != DType::kBF16)) {
        return Status::invalid_argument(file.path() + ": norm '" + t.name + "' is " + t.dtype_name + ", not F32/F16/BF16");
      }
      const int64_t n = t.shape[0];
      PAGODA_ASSIGN_OR_RETURN(AlignedBuffer plus_one, AlignedBuffer::allocate(static_cast<size_t>(n) * sizeof(float)));
      auto* out = reinterpret_cast<float*>(plus_one.data());
      kernels::dequantize_row(*ref.dtype, ref.data, out, n);
      for (int64_t i = 0; i < n; ++i) out[i] += 1.0f;
      ref.data = plus_one.data();
      ref.dtype = DType::kF32;
      ref.type_name = "F32";
      copies_.push_back(std::move(plus_one));
    } else if (reinterpret_cast<uintptr_t>(ref.data) % elem != 0) {  // never for files the safetensors library writes
      PAGODA_ASSIGN_OR_RETURN(AlignedBuffer copy, AlignedBuffer::allocate(bytes));
      std::memcpy(copy.data(), ref.data, bytes);
      ref.data = copy.data();
      copies_.push_back(std::move(copy));
    }
    uint64_t& h = weights_digest_;
    h = fnv1a(name->data(), name->size(), h);
    h = fnv1a(t.dtype_name.data(), t.dtype_name.size(), h);
    h = fnv1a(t.shape.data(), t.shape.size() * sizeof(int64_t), h);
    const size_t edge = std::min<size_t>(256, bytes);
    h = fnv1a(ref.data, edge, h);
    h = fnv1a(ref.data + bytes - edge, edge, h);
    tensors_.emplace(std::move(*name), std::move(ref));
  }
  files_.push_back(std::move(file));
  return Status::ok();
}

Result<HfCheckpoint> HfCheckpoint::open(const std::string& dir) {
  HfCheckpoint c;
  c.dir_ = dir;
  c.weights_digest_ = 0xcbf29ce484222325ull;
  const fs::path root(dir);
  PAGODA_ASSIGN_OR_RETURN(std::string config_text, read_text(root / "config.json"));
  PAGODA_ASSIGN_OR_RETURN(c.config_, config_from_hf_json(config_text, (root / "config.json").string()));
  std::error_code ec;
  if (fs::exists(root / "model.safetensors.index.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(auto by_file, read_index(root / "model.safetensors.index.json"));
    for (const auto& [file, names] : by_file) {
      PAGODA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open((root / file).string()));
      PAGODA_RETURN_IF_ERROR(c.add_file(std::move(f), &names));
    }
  } else if (fs::exists(root / "model.safetensors", ec)) {
    PAGODA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open((root / "model.safetensors").string()));
    PAGODA_RETURN_IF_ERROR(c.add_file(std::move(f), nullptr));
  } else {
    return Status::not_found(dir + ": no model.safetensors or model.safetensors.index.json (PyTorch .bin checkpoints "
                             "are not supported; convert them to safetensors)");
  }
  if (!c.config_.tie_word_embeddings && !c.tensors_.contains("output.weight")) {
    return Status::invalid_argument(dir + ": no lm_head.weight, and config.json does not set tie_word_embeddings");
  }
  return c;
}

GgufFile HfCheckpoint::metadata() const {
  const ModelConfig& m = config_.model;
  GgufFile f;
  const std::string a = m.arch_name + ".";
  f.set("general.architecture", GgufValue::of_string(m.arch_name));
  f.set("general.name", GgufValue::of_string(fs::path(dir_).lexically_normal().filename().string()));
  f.set("pagoda.source", GgufValue::of_string("huggingface " + config_.architecture));
  f.set(a + "embedding_length", GgufValue::of_i64(m.n_embd));
  f.set(a + "block_count", GgufValue::of_i64(m.n_layer));
  f.set(a + "attention.head_count", GgufValue::of_i64(m.n_head));
  f.set(a + "attention.head_count_kv", GgufValue::of_i64(m.n_kv_head));
  f.set(a + "attention.key_length", GgufValue::of_i64(m.head_dim));
  f.set(a + "feed_forward_length", GgufValue::of_i64(m.n_ff));
  f.set(a + "vocab_size", GgufValue::of_i64(m.n_vocab));
  f.set(a + "context_length", GgufValue::of_i64(m.n_ctx_train));
  f.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(m.rms_eps));
  f.set(a + "rope.dimension_count", GgufValue::of_i64(m.rope.rot_dim));
  f.set(a + "rope.freq_base", GgufValue::of_f32(m.rope.freq_base));
  if (m.rope.freq_scale != 1.0f) {
    f.set(a + "rope.scaling.type", GgufValue::of_string("linear"));
    f.set(a + "rope.scaling.factor", GgufValue::of_f32(1.0f / m.rope.freq_scale));
  }
  if (!m.rope.freq_factors.empty()) f.set("pagoda.rope.freq_factors", GgufValue::f32_array(m.rope.freq_factors));
  if (m.sliding_window > 0) f.set(a + "attention.sliding_window", GgufValue::of_i64(m.sliding_window));
  if (m.has_layer_windows()) {  // Gemma 3: the sliding layers' window, which layers, their RoPE base
    std::vector<bool> sliding;
    int64_t window = 0;
    for (int64_t w : m.layer_window) {
      sliding.push_back(w > 0);
      window = std::max(window, w);
    }
    f.set(a + "attention.sliding_window", GgufValue::of_i64(window));
    int64_t period = 0;  // an integer pattern where there is one (llama.cpp reads only that)
    for (int64_t n = 1; n <= m.n_layer && period == 0; ++n) {
      if (sliding == sliding_pattern(m.n_layer, n)) period = n;
    }
    if (period > 0) {
      f.set(a + "attention.sliding_window_pattern", GgufValue::of_u32(static_cast<uint32_t>(period)));
    } else {
      std::vector<uint8_t> raw(sliding.begin(), sliding.end());
      f.set(a + "attention.sliding_window_pattern", GgufValue::numeric_array(GgufType::kBool, std::move(raw)));
    }
    f.set(a + "rope.freq_base_swa", GgufValue::of_f32(m.rope_local.freq_base));
  }
  if (m.final_logit_softcap > 0) f.set(a + "final_logit_softcapping", GgufValue::of_f32(m.final_logit_softcap));
  if (m.is_moe()) {
    f.set(a + "expert_count", GgufValue::of_i64(m.n_expert));
    f.set(a + "expert_used_count", GgufValue::of_i64(m.n_expert_used));
    f.set(a + "expert_feed_forward_length", GgufValue::of_i64(m.n_ff_exp));
  }
  f.set("pagoda.weights_digest", GgufValue::of_u64(weights_digest_));
  return f;
}

}  // namespace pagoda::model
