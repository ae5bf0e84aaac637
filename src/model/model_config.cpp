#include "model/model_config.h"

#include "model/gguf.h"

namespace pagoda::model {

namespace {

Result<int64_t> require_int(const GgufFile& file, const std::string& key) {
  auto v = file.get_int(key);
  if (!v.has_value()) return Status::error("missing or non-integer metadata key '" + key + "'");
  return *v;
}

}  // namespace

Result<ModelConfig> config_from_gguf(const GgufFile& file) {
  ModelConfig c;
  auto arch = file.get_string("general.architecture");
  if (!arch.has_value()) return Status::error("missing metadata key 'general.architecture'");
  c.arch_name = *arch;
  if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
    c.rope.style = kernels::RopeStyle::kAdjacentPairs;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope.style = kernels::RopeStyle::kNeoxHalves;
    c.has_qkv_bias = true;
  } else {
    return Status::error("unsupported architecture '" + c.arch_name + "' (supported: llama, qwen2)");
  }
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
  c.head_dim = file.get_int(p + "attention.key_length").value_or(c.n_embd / c.n_head);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || (!file.get_int(p + "attention.key_length") && c.n_embd % c.n_head != 0)) {
    return Status::error("bad head dimension " + std::to_string(c.head_dim));
  }
  c.rope.head_dim = c.head_dim;
  c.rope.rot_dim = file.get_int(p + "rope.dimension_count").value_or(c.head_dim);
  if (c.rope.rot_dim <= 0 || c.rope.rot_dim > c.head_dim || c.rope.rot_dim % 2 != 0) {
    return Status::error("bad rope.dimension_count " + std::to_string(c.rope.rot_dim));
  }
  c.rope.freq_base = static_cast<float>(file.get_float(p + "rope.freq_base").value_or(10000.0));
  auto scaling = file.get_string(p + "rope.scaling.type");
  if (scaling.has_value() && *scaling == "linear") {
    double factor = file.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor <= 0) return Status::error("bad rope.scaling.factor");
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling.has_value() && *scaling != "none") {
    return Status::error("unsupported rope scaling type '" + *scaling + "'");
  }
  if (auto v = file.get_int(p + "vocab_size")) c.n_vocab = *v;
  if (const auto* tokens = file.get_string_array("tokenizer.ggml.tokens"); tokens && c.n_vocab == 0) {
    c.n_vocab = static_cast<int64_t>(tokens->size());
  }
  if (const auto* emb = file.find_tensor("token_embd.weight"); emb && emb->dims.size() == 2) {
    c.n_vocab = emb->dims[1];
  }
  if (c.n_vocab <= 0) return Status::error("cannot tell the vocabulary size");
  return c;
}

}  // namespace pagoda::model
