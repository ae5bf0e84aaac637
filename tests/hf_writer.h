// Test helper: writes safetensors files and Hugging Face model folders (config.json +
// model.safetensors, or shards + model.safetensors.index.json) from a GGUF model, the
// inverse of model/format/hf_checkpoint.h. For "llama" GGUF files the Q/K rows are permuted back
// from ggml's adjacent-pair order to HF's rotate_half order (the inverse of llama.cpp's
// convert script): HF row s * hd/2 + i of each head is GGUF row 2i + s.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant.h"
#include "model/text/byte_level.h"
#include "model/format/gguf.h"

namespace pagoda::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// A whole safetensors file: tensors laid out in order after a space-padded header. `shift`
// (for tests of misaligned data) inserts that many padding bytes before the first tensor.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors,
                                              const std::map<std::string, std::string>& metadata = {}, size_t shift = 0) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = shift;
  for (const StTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::vector<uint8_t> out(8);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), text.begin(), text.end());
  out.resize(out.size() + shift, 0);
  for (const StTensor& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// f32 values -> bytes of a safetensors dtype (F32, F16, BF16).
inline std::vector<uint8_t> encode(const std::vector<float>& v, const std::string& dtype) {
  std::vector<uint8_t> out;
  if (dtype == "F32") {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  out.resize(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = dtype == "F16" ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

struct HfWriteOptions {
  std::string dtype = "F32";   // of every tensor (norms too, unless vectors_f32)
  bool vectors_f32 = false;    // 1-D tensors (norms, biases) in F32
  int shards = 1;              // > 1: model-0000i-of-0000n.safetensors + index
  bool tie = false;            // leave lm_head out, set tie_word_embeddings
  nlohmann::json extra_config = nlohmann::json::object();  // merged into config.json
};

// The HF name of a GGUF tensor name (inverse of model::gguf_name_from_hf; gemma: Gemma's four norms).
inline std::string hf_name_from_gguf(const std::string& g, bool gemma = false) {
  static const std::map<std::string, std::string> top = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                         {"output.weight", "lm_head.weight"},
                                                         {"output_norm.weight", "model.norm.weight"}};
  if (auto it = top.find(g); it != top.end()) return it->second;
  static const std::map<std::string, std::string> layer = {
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},       {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},        {"ffn_down.weight", "mlp.down_proj.weight"}};
  static const std::map<std::string, std::string> gemma_layer = {
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
  const size_t dot1 = g.find('.'), dot2 = g.find('.', dot1 + 1);
  const std::string rest = g.substr(dot2 + 1);
  const std::string hf = gemma && gemma_layer.count(rest) ? gemma_layer.at(rest) : layer.at(rest);
  return "model.layers." + g.substr(dot1 + 1, dot2 - dot1 - 1) + "." + hf;
}

// Writes `dir` (created) from a llama / qwen2 / qwen3 / gemma3 GGUF model with f32/f16/bf16
// tensors. gemma3: Gemma3ForCausalLM's keys, Gemma's norm names, norms stored as w - 1 (HF's
// Gemma RMSNorm scales by 1 + w; GGUF files hold w + 1 already).
inline void write_hf_folder(const model::GgufFile& gguf, const std::string& dir, const HfWriteOptions& o = {}) {
  std::filesystem::create_directories(dir);
  const std::string arch = *gguf.get_string("general.architecture");
  const std::string p = arch + ".";
  const int64_t n_embd = *gguf.get_int(p + "embedding_length"), n_head = *gguf.get_int(p + "attention.head_count");
  const int64_t n_kv_head = gguf.get_int(p + "attention.head_count_kv").value_or(n_head);
  const int64_t head_dim = gguf.get_int(p + "attention.key_length").value_or(n_embd / n_head);
  nlohmann::json config = {
      {"architectures", {arch == "llama"   ? "LlamaForCausalLM"
                         : arch == "qwen2" ? "Qwen2ForCausalLM"
                         : arch == "gemma3" ? "Gemma3ForCausalLM"
                         : arch == "qwen3moe" ? "Qwen3MoeForCausalLM"
                                            : "Qwen3ForCausalLM"}},
      {"hidden_size", n_embd},
      {"num_hidden_layers", *gguf.get_int(p + "block_count")},
      {"num_attention_heads", n_head},
      {"num_key_value_heads", n_kv_head},
      {"head_dim", head_dim},
      {"intermediate_size", *gguf.get_int(p + "feed_forward_length")},
      {"max_position_embeddings", gguf.get_int(p + "context_length").value_or(2048)},
      {"rms_norm_eps", gguf.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5)},
      {"rope_theta", gguf.get_float(p + "rope.freq_base").value_or(10000.0)},
      {"tie_word_embeddings", o.tie || gguf.find_tensor("output.weight") == nullptr},
      {"torch_dtype", o.dtype == "F32" ? "float32" : o.dtype == "F16" ? "float16" : "bfloat16"},
  };
  const bool gemma = arch == "gemma3";
  if (auto w = gguf.get_int(p + "attention.sliding_window")) config["sliding_window"] = *w;
  if (gemma) {
    config["model_type"] = "gemma3_text";
    config["hidden_activation"] = "gelu_pytorch_tanh";
    config["query_pre_attn_scalar"] = head_dim;
    config["rope_local_base_freq"] = gguf.get_float(p + "rope.freq_base_swa").value_or(10000.0);
    if (auto n = gguf.get_int(p + "attention.sliding_window_pattern")) config["sliding_window_pattern"] = *n;
    if (auto cap = gguf.get_float(p + "final_logit_softcapping")) config["final_logit_softcapping"] = *cap;
  } else {
    config["hidden_act"] = "silu";
  }
  if (auto n = gguf.get_int(p + "expert_count")) {  // qwen3moe
    config["num_experts"] = *n;
    config["num_experts_per_tok"] = *gguf.get_int(p + "expert_used_count");
    config["moe_intermediate_size"] = *gguf.get_int(p + "expert_feed_forward_length");
    config["norm_topk_prob"] = true;
  }
  const model::GgufTensorInfo* emb = gguf.find_tensor("token_embd.weight");
  config["vocab_size"] = emb->dims[1];
  config.update(o.extra_config);
  write_text(dir + "/config.json", config.dump(2));

  std::vector<StTensor> tensors;
  for (const model::GgufTensorInfo& t : gguf.tensors()) {
    if (o.tie && t.name == "output.weight") continue;
    const int64_t n = t.num_elements();
    std::vector<float> v(n);
    kernels::dequantize_row(*t.dtype, gguf.tensor_data(t), v.data(), n);
    const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
    if (arch == "llama" && (q || k)) {  // rows: GGUF adjacent pairs -> HF halves
      const int64_t n_in = t.dims[0], heads = q ? n_head : n_kv_head;
      std::vector<float> hf(n);
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < head_dim / 2; ++i) {
          for (int64_t s = 0; s < 2; ++s) {
            const float* src = v.data() + (h * head_dim + 2 * i + s) * n_in;
            std::copy(src, src + n_in, hf.data() + (h * head_dim + s * head_dim / 2 + i) * n_in);
          }
        }
      }
      v = std::move(hf);
    }
    if (t.dims.size() == 3) {  // experts {n_in, n_out, n_expert}: one HF tensor each
      const std::string layer = t.name.substr(4, t.name.find('.', 4) - 4);
      const std::string kind = t.name.find("gate_exps") != std::string::npos ? "gate_proj"
                               : t.name.find("up_exps") != std::string::npos ? "up_proj" : "down_proj";
      const int64_t per = t.dims[0] * t.dims[1];
      for (int64_t e = 0; e < t.dims[2]; ++e) {
        const std::vector<float> part(v.begin() + e * per, v.begin() + (e + 1) * per);
        tensors.push_back({"model.layers." + layer + ".mlp.experts." + std::to_string(e) + "." + kind + ".weight", o.dtype,
                           {t.dims[1], t.dims[0]}, encode(part, o.dtype)});
      }
      continue;
    }
    if (t.name.ends_with("ffn_gate_inp.weight")) {
      tensors.push_back({"model.layers." + t.name.substr(4, t.name.find('.', 4) - 4) + ".mlp.gate.weight", o.dtype,
                         {t.dims.rbegin(), t.dims.rend()}, encode(v, o.dtype)});
      continue;
    }
    if (gemma && t.dims.size() == 1 && t.name.ends_with("norm.weight")) {
      for (float& x : v) x -= 1.0f;
    }
    const std::string dtype = o.vectors_f32 && t.dims.size() == 1 ? "F32" : o.dtype;
    tensors.push_back({hf_name_from_gguf(t.name, gemma), dtype, {t.dims.rbegin(), t.dims.rend()}, encode(v, dtype)});
  }
  if (o.shards <= 1) {
    write_bytes(dir + "/model.safetensors", safetensors_bytes(tensors, {{"format", "pt"}}));
    return;
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < o.shards; ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(o.shards) + ".safetensors";
    std::vector<StTensor> part;
    for (size_t i = s; i < tensors.size(); i += o.shards) {
      part.push_back(tensors[i]);
      index["weight_map"][tensors[i].name] = file;
    }
    write_bytes(dir + "/" + file, safetensors_bytes(part, {{"format", "pt"}}));
  }
  write_text(dir + "/model.safetensors.index.json", index.dump(2));
}

// A byte-level BPE tokenizer.json of 261 tokens (fewer than the model's 300 rows): the 256
// byte tokens, merges "Ġ t", "h e", "Ġt he", "l l" (ids 256-259) and <|endoftext|> (260).
inline void write_byte_level_tokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(model::byte_level_char(static_cast<uint8_t>(b)))] = b;
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "l l"};
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["ll"] = 259;
  const nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 260}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                 {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}},
  };
  write_text(dir + "/tokenizer.json", tokenizer.dump());
  const nlohmann::json config = {{"bos_token", nullptr}, {"eos_token", "<|endoftext|>"}, {"add_bos_token", false},
                                 {"chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"}};
  write_text(dir + "/tokenizer_config.json", config.dump());
}

}  // namespace pagoda::testing
