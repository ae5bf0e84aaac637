#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/quant.h"
#include "model/arch/registry.h"
#include "model/format/gguf.h"

namespace pagoda::model {

namespace {

Result<int64_t> require_int(const GgufFile& file, const std::string& key) {
  auto v = file.get_int(key);
  if (!v.has_value()) return Status::error("missing or non-integer metadata key '" + key + "'");
  return *v;
}

// rope_freqs.weight (llama.cpp's Llama 3 scaling): [rot_dim / 2] frequency divisors.
Result<std::vector<float>> read_rope_freqs(const GgufFile& file, int64_t rot_dim) {
  const GgufTensorInfo* t = file.find_tensor("rope_freqs.weight");
  if (t == nullptr) return std::vector<float>{};
  if (t->dims != std::vector<int64_t>{rot_dim / 2} || !t->dtype.has_value() || dtype_info(*t->dtype).block_elems != 1) {
    return Status::error("tensor 'rope_freqs.weight' must be an f32/f16/bf16 vector of rope.dimension_count / 2 = " +
                         std::to_string(rot_dim / 2) + " values");
  }
  std::vector<float> factors(rot_dim / 2);
  if (file.tensor_data(*t) == nullptr) return factors;  // header-only read: shape checked, values unknown
  kernels::dequantize_row(*t->dtype, file.tensor_data(*t), factors.data(), rot_dim / 2);
  for (float f : factors) {
    if (!(f > 0) || !std::isfinite(f)) return Status::error("tensor 'rope_freqs.weight' holds a value that is not positive");
  }
  return factors;
}

// {arch}.expert_gating_func (0 or absent: softmax, 1 softmax, 2 sigmoid; others refused),
// expert_weights_norm, expert_weights_scale (0 or absent: 1), expert_group_count and
// expert_group_used_count (absent: no groups).
Status read_expert_routing(const GgufFile& file, const std::string& p, bool default_normalize, ExpertRouting& r) {
  const int64_t gating = file.get_int(p + "expert_gating_func").value_or(0);
  if (gating != 0 && gating != 1 && gating != 2) {
    return Status::error(p + "expert_gating_func " + std::to_string(gating) +
                         " is not supported (1: softmax, 2: sigmoid are)");
  }
  r.gating = gating == 2 ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
  r.normalize = file.get_bool(p + "expert_weights_norm").value_or(default_normalize);
  const double scale = file.get_float(p + "expert_weights_scale").value_or(0.0);
  r.scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  r.n_groups = std::max<int64_t>(1, file.get_int(p + "expert_group_count").value_or(1));
  r.n_groups_used = r.n_groups > 1 ? file.get_int(p + "expert_group_used_count").value_or(0) : 1;
  return Status::ok();
}

// deepseek2 (MLA): the latent geometry, the YaRN softmax scale, and the MoE layers after the
// leading dense ones.
Status read_mla_config(const GgufFile& file, const std::string& p, double mscale, ModelConfig& c) {
  PAGODA_ASSIGN_OR_RETURN(c.kv_lora_rank, require_int(file, p + "attention.kv_lora_rank"));
  c.q_lora_rank = file.get_int(p + "attention.q_lora_rank").value_or(0);
  // Files converted for llama.cpp's MLA path name the decompressed head widths *_mla.
  if (auto k = file.get_int(p + "attention.key_length_mla")) c.head_dim = *k;
  c.rope.head_dim = c.head_dim;
  c.qk_rope_dim = c.rope.rot_dim;
  c.qk_nope_dim = c.head_dim - c.qk_rope_dim;
  c.v_head_dim = file.get_int(p + "attention.value_length_mla")
                     .value_or(file.get_int(p + "attention.value_length").value_or(c.qk_nope_dim));
  c.n_kv_head = c.n_head;
  if (c.kv_lora_rank <= 0 || c.kv_lora_rank > 65536 || c.q_lora_rank < 0 || c.q_lora_rank > 65536 ||
      c.qk_nope_dim <= 0 || c.v_head_dim <= 0 || c.v_head_dim > 4096) {
    return Status::error("bad MLA geometry: kv_lora_rank " + std::to_string(c.kv_lora_rank) + ", q_lora_rank " +
                         std::to_string(c.q_lora_rank) + ", key_length " + std::to_string(c.head_dim) +
                         " with rope.dimension_count " + std::to_string(c.qk_rope_dim) + ", value_length " +
                         std::to_string(c.v_head_dim));
  }
  // Mixture of experts after the leading dense layers (DeepSeek-V2/V3, Kimi K2): read as
  // llama.cpp reads them (src/models/deepseek2.cpp): softmax gating unless the file says
  // otherwise, weights not renormalized unless expert_weights_norm, scale 1 unless given.
  const int64_t n_expert = file.get_int(p + "expert_count").value_or(0);
  const int64_t n_dense = file.get_int(p + "leading_dense_block_count").value_or(n_expert > 0 ? 0 : c.n_layer);
  if (n_expert > 0 && n_dense < c.n_layer) {
    c.n_expert = n_expert;
    PAGODA_ASSIGN_OR_RETURN(c.n_expert_used, require_int(file, p + "expert_used_count"));
    PAGODA_ASSIGN_OR_RETURN(c.n_ff_exp, require_int(file, p + "expert_feed_forward_length"));
    c.n_expert_shared = file.get_int(p + "expert_shared_count").value_or(0);
    c.n_dense_lead = n_dense;
    PAGODA_RETURN_IF_ERROR(read_expert_routing(file, p, /*default_normalize=*/false, c.routing));
  }
  c.attn_scale = static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(c.head_dim)));
  return Status::ok();
}

}  // namespace

Result<std::vector<float>> yarn_freq_factors(const YarnRopeScaling& s, double freq_base, int64_t rot_dim) {
  if (!(s.factor >= 1) || !std::isfinite(s.factor) || !(s.original_context > 0) || !(s.beta_fast > 0) ||
      !(s.beta_slow > 0) || !std::isfinite(s.log_multiplier)) {
    return Status::error("bad yarn rope scaling: needs factor >= 1, original_context_length > 0 and positive betas");
  }
  auto corr_dim = [&](double n_rot) {
    return rot_dim * std::log(s.original_context / (n_rot * 2 * std::numbers::pi)) / (2 * std::log(freq_base));
  };
  const double low = std::max(0.0, std::floor(corr_dim(s.beta_fast)));
  const double high = std::min(static_cast<double>(rot_dim - 1), std::ceil(corr_dim(s.beta_slow)));
  std::vector<float> factors(rot_dim / 2);
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
    const double ramp = 1.0 - std::min(1.0, std::max(0.0, y));
    factors[i] = static_cast<float>(1.0 / (ramp + (1.0 - ramp) / s.factor));
  }
  return factors;
}

Status set_kv_source_layers(ModelConfig& c, const std::vector<int64_t>& src) {
  if (static_cast<int64_t>(src.size()) != c.n_layer) {
    return Status::error("attention.kv_source_layer has " + std::to_string(src.size()) + " entries for " +
                         std::to_string(c.n_layer) + " layers");
  }
  c.kv_source_layer.assign(src.begin(), src.end());
  c.kv_cache_layer.assign(src.size(), 0);
  int32_t n_sources = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const int64_t s = src[l];
    if (s < 0 || s > l || src[s] != s) {
      return Status::error("attention.kv_source_layer: layer " + std::to_string(l) + " reads the K/V of layer " +
                           std::to_string(s) + ", which must be an earlier (or the same) layer that owns its K/V");
    }
    c.kv_cache_layer[l] = s == l ? n_sources++ : c.kv_cache_layer[s];
  }
  if (n_sources == c.n_layer) {  // nothing shared
    c.kv_source_layer.clear();
    c.kv_cache_layer.clear();
  }
  return Status::ok();
}

Status validate_config(const ModelConfig& c) {
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.n_ff <= 0 ||
      c.n_embd > (1 << 20) || c.n_layer > 4096 || c.n_head > 4096 || c.n_ff > (1 << 22)) {
    return Status::error("implausible hyperparameters (embedding " + std::to_string(c.n_embd) +
                         ", layers " + std::to_string(c.n_layer) + ", heads " + std::to_string(c.n_head) +
                         "/" + std::to_string(c.n_kv_head) + ", ff " + std::to_string(c.n_ff) + ")");
  }
  if (c.n_head % c.n_kv_head != 0) {
    return Status::error("head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                         std::to_string(c.n_kv_head));
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 4096) {
    return Status::error("bad head dimension " + std::to_string(c.head_dim));
  }
  if (c.rope.head_dim != c.head_dim || c.rope.rot_dim <= 0 || c.rope.rot_dim > c.head_dim || c.rope.rot_dim % 2 != 0) {
    return Status::error("bad rope dimension count " + std::to_string(c.rope.rot_dim));
  }
  if (!(c.rope.freq_base > 0) || !std::isfinite(c.rope.freq_base)) return Status::error("bad rope frequency base");
  if (!(c.rope.freq_scale > 0) || !std::isfinite(c.rope.freq_scale)) return Status::error("bad rope scaling factor");
  if (!c.rope.freq_factors.empty() && static_cast<int64_t>(c.rope.freq_factors.size()) != c.rope.rot_dim / 2) {
    return Status::error("rope frequency factors do not match the rope dimension count");
  }
  if (!(c.rms_eps > 0) || !std::isfinite(c.rms_eps)) return Status::error("bad rms norm epsilon");
  if (c.sliding_window < 0) return Status::error("negative sliding window");
  if (!c.layer_window.empty()) {
    if (static_cast<int64_t>(c.layer_window.size()) != c.n_layer) return Status::error("per-layer windows do not match the layer count");
    for (int64_t w : c.layer_window) {
      if (w < 0) return Status::error("negative sliding window");
    }
    if (c.rope_local.head_dim != c.head_dim || c.rope_local.rot_dim != c.rope.rot_dim || !(c.rope_local.freq_base > 0)) {
      return Status::error("bad RoPE of the sliding-window layers");
    }
  }
  if (c.n_expert != 0 || c.n_expert_used != 0) {
    if (c.n_expert < 1 || c.n_expert > 4096 || c.n_expert_used < 1 || c.n_expert_used > c.n_expert || c.n_ff_exp < 1) {
      return Status::error("bad mixture of experts: " + std::to_string(c.n_expert) + " experts, " +
                           std::to_string(c.n_expert_used) + " used per token, width " + std::to_string(c.n_ff_exp));
    }
    if (c.n_expert_shared < 0 || c.n_expert_shared > 64 || c.n_dense_lead < 0 || c.n_dense_lead > c.n_layer) {
      return Status::error("bad mixture of experts: " + std::to_string(c.n_expert_shared) + " shared experts, " +
                           std::to_string(c.n_dense_lead) + " leading dense layers of " + std::to_string(c.n_layer));
    }
    const ExpertRouting& r = c.routing;
    // Groups as DeepSeek-V3 ranks them: by the sum of each group's two best experts, so a group
    // holds at least two, and the chosen groups hold at least n_expert_used experts.
    if (r.n_groups < 1 || c.n_expert % r.n_groups != 0 || r.n_groups_used < 1 || r.n_groups_used > r.n_groups ||
        (r.n_groups > 1 && (c.n_expert / r.n_groups < 2 || r.n_groups_used * (c.n_expert / r.n_groups) < c.n_expert_used))) {
      return Status::error("bad expert groups: " + std::to_string(r.n_groups) + " groups of the " +
                           std::to_string(c.n_expert) + " experts, " + std::to_string(r.n_groups_used) +
                           " used, " + std::to_string(c.n_expert_used) + " experts per token");
    }
    if (!(r.scale > 0) || !std::isfinite(r.scale)) {
      return Status::error("bad expert_weights_scale " + std::to_string(r.scale));
    }
  }
  if (c.n_vocab <= 0) return Status::error("cannot tell the vocabulary size");
  if (c.n_vocab > (int64_t{1} << 24)) return Status::error("bad vocabulary size " + std::to_string(c.n_vocab));
  if (c.n_ctx_train <= 0) return Status::error("bad context length " + std::to_string(c.n_ctx_train));
  return Status::ok();
}

Result<std::vector<float>> llama3_freq_factors(const Llama3RopeScaling& s, double freq_base, int64_t rot_dim) {
  if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
      !(s.original_context > 0) || !std::isfinite(s.factor) || !std::isfinite(s.high_freq_factor) ||
      !std::isfinite(s.original_context)) {
    return Status::error("bad llama3 rope_scaling: needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                         "original_max_position_embeddings > 0");
  }
  const double low_wavelen = s.original_context / s.low_freq_factor;    // longer: fully scaled
  const double high_wavelen = s.original_context / s.high_freq_factor;  // shorter: kept
  std::vector<float> factors(rot_dim / 2);
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    const double inv_freq = std::pow(freq_base, -2.0 * i / rot_dim);
    const double wavelen = 2 * std::numbers::pi / inv_freq;
    double scaled;  // new inverse frequency / old
    if (wavelen < high_wavelen) {
      scaled = 1.0;
    } else if (wavelen > low_wavelen) {
      scaled = 1.0 / s.factor;
    } else {
      const double smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      scaled = (1 - smooth) / s.factor + smooth;
    }
    factors[i] = static_cast<float>(1.0 / scaled);
  }
  return factors;
}

std::vector<bool> sliding_pattern(int64_t n_layer, int64_t pattern) {
  std::vector<bool> out(static_cast<size_t>(n_layer));
  for (int64_t i = 0; i < n_layer; ++i) out[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  return out;
}

Result<std::vector<bool>> gguf_sliding_layers(const GgufFile& f, const std::string& arch, int64_t n_layer) {
  const std::string key = arch + ".attention.sliding_window_pattern";
  if (const GgufValue* v = f.find(key)) {
    if (auto n = v->as_int(); n && *n > 0) return sliding_pattern(n_layer, *n);
    const std::vector<uint8_t>* raw = v->array_bytes();
    if (v->type == GgufType::kArray && v->element_type == GgufType::kBool && raw != nullptr &&
        static_cast<int64_t>(raw->size()) == n_layer) {
      std::vector<bool> out;
      for (uint8_t b : *raw) out.push_back(b != 0);
      return out;
    }
    return Status::error("metadata key '" + key + "' is neither a positive integer nor " + std::to_string(n_layer) + " bools");
  }
  if (const arch::ArchInfo* a = arch::find_gguf(arch); a != nullptr && a->default_sliding_pattern > 0) {
    return sliding_pattern(n_layer, a->default_sliding_pattern);
  }
  return std::vector<bool>{};  // every layer
}

Result<ModelConfig> config_from_gguf(const GgufFile& file) {
  ModelConfig c;
  PAGODA_ASSIGN_OR_RETURN(const arch::ArchInfo* a, arch::check_runnable(file));
  c.arch = *a->arch;
  c.arch_name = std::string(a->gguf_name);
  c.rope.style = a->gguf_rope;
  c.has_qkv_bias = a->qkv_bias;
  c.has_qk_norm = a->qk_norm;
  c.name = file.get_string("general.name").value_or("");
  const std::string p = c.arch_name + ".";
  PAGODA_ASSIGN_OR_RETURN(c.n_embd, require_int(file, p + "embedding_length"));
  PAGODA_ASSIGN_OR_RETURN(c.n_layer, require_int(file, p + "block_count"));
  PAGODA_ASSIGN_OR_RETURN(c.n_head, require_int(file, p + "attention.head_count"));
  PAGODA_ASSIGN_OR_RETURN(c.n_ff, require_int(file, p + "feed_forward_length"));
  c.n_kv_head = file.get_int(p + "attention.head_count_kv").value_or(c.n_head);
  c.n_ctx_train = file.get_int(p + "context_length").value_or(2048);
  c.sliding_window = file.get_int(p + "attention.sliding_window").value_or(0);
  if (c.sliding_window < 0) return Status::error("negative attention.sliding_window");
  c.rms_eps = static_cast<float>(file.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (c.n_head > 0 && !file.get_int(p + "attention.key_length") && c.n_embd % c.n_head != 0) {
    return Status::error("embedding_length " + std::to_string(c.n_embd) + " is not a multiple of head_count " +
                         std::to_string(c.n_head) + " and attention.key_length is absent");
  }
  c.head_dim = file.get_int(p + "attention.key_length").value_or(c.n_head > 0 ? c.n_embd / c.n_head : 0);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) return Status::error("bad head dimension " + std::to_string(c.head_dim));
  c.rope.head_dim = c.head_dim;
  c.rope.rot_dim = file.get_int(p + "rope.dimension_count").value_or(c.head_dim);
  if (c.rope.rot_dim <= 0 || c.rope.rot_dim > c.head_dim || c.rope.rot_dim % 2 != 0) {
    return Status::error("bad rope.dimension_count " + std::to_string(c.rope.rot_dim));
  }
  c.rope.freq_base = static_cast<float>(file.get_float(p + "rope.freq_base").value_or(10000.0));
  auto scaling = file.get_string(p + "rope.scaling.type");
  YarnRopeScaling yarn;  // factor 1: no YaRN
  if (scaling.has_value() && *scaling == "linear") {
    double factor = file.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor <= 0) return Status::error("bad rope.scaling.factor");
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling.has_value() && *scaling == "yarn" && a->yarn) {
    yarn.factor = file.get_float(p + "rope.scaling.factor").value_or(1.0);
    yarn.original_context = file.get_float(p + "rope.scaling.original_context_length").value_or(4096);
    yarn.log_multiplier = file.get_float(p + "rope.scaling.yarn_log_multiplier").value_or(0.0);
    yarn.beta_fast = file.get_float(p + "rope.scaling.yarn_beta_fast").value_or(32.0);
    yarn.beta_slow = file.get_float(p + "rope.scaling.yarn_beta_slow").value_or(1.0);
    PAGODA_ASSIGN_OR_RETURN(c.rope.freq_factors, yarn_freq_factors(yarn, c.rope.freq_base, c.rope.rot_dim));
  } else if (scaling.has_value() && *scaling != "none") {
    return Status::error("unsupported rope scaling type '" + *scaling + "'" +
                         (*scaling == "yarn" ? " for " + c.arch_name + " (yarn: deepseek2 only)" : std::string()));
  }
  if (c.rope.freq_factors.empty()) {
    PAGODA_ASSIGN_OR_RETURN(c.rope.freq_factors, read_rope_freqs(file, c.rope.rot_dim));
  }
  if (a->mla) PAGODA_RETURN_IF_ERROR(read_mla_config(file, p, yarn_attn_mscale(yarn), c));
  if (a->moe) {  // {arch}.expert_count, expert_used_count, expert_feed_forward_length (model/moe.h)
    PAGODA_ASSIGN_OR_RETURN(c.n_expert, require_int(file, p + "expert_count"));
    PAGODA_ASSIGN_OR_RETURN(c.n_expert_used, require_int(file, p + "expert_used_count"));
    c.n_ff_exp = file.get_int(p + "expert_feed_forward_length").value_or(c.n_expert_used > 0 ? c.n_ff / c.n_expert_used : 0);
    // qwen3moe: softmax over all experts, the picked ones renormalized (llama.cpp passes
    // norm_w true for it whatever the file says).
    PAGODA_RETURN_IF_ERROR(read_expert_routing(file, p, /*default_normalize=*/true, c.routing));
    if (c.routing.gating != ExpertGating::kSoftmax || c.routing.n_groups != 1 || c.routing.scale != 1.0f) {
      return Status::error(p + "expert_gating_func, expert_group_count or expert_weights_scale: " + c.arch_name +
                           " gates by softmax over all experts, unscaled (llama.cpp ignores these keys for it)");
    }
    c.routing.normalize = true;
  }
  if (a->read_gguf != nullptr) PAGODA_RETURN_IF_ERROR(a->read_gguf(file, p, c));
  if (const GgufValue* v = file.find(p + "attention.kv_source_layer")) {
    auto sources = v->to_int_array();
    if (!sources.has_value()) return Status::error("attention.kv_source_layer must be an array of layer indices");
    PAGODA_RETURN_IF_ERROR(set_kv_source_layers(c, *sources));
    if (c.is_mla() && !c.kv_source_layer.empty()) {
      return Status::error("cross-layer KV sharing (attention.kv_source_layer) with MLA is not supported");
    }
  }
  if (auto v = file.get_int(p + "vocab_size")) c.n_vocab = *v;
  if (const auto* tokens = file.get_string_array("tokenizer.ggml.tokens"); tokens && c.n_vocab == 0) {
    c.n_vocab = static_cast<int64_t>(tokens->size());
  }
  if (const auto* emb = file.find_tensor("token_embd.weight"); emb && emb->dims.size() == 2) {
    c.n_vocab = emb->dims[1];
  }
  PAGODA_RETURN_IF_ERROR(validate_config(c));
  return c;
}

}  // namespace pagoda::model
