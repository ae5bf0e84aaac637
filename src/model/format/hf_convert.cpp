// gguf_from_hf: the layout rules are at the top of model/format/hf_convert.h.
#include "model/format/hf_convert.h"

#include <cstring>

#include "kernels/quant.h"
#include "model/arch/registry.h"
#include "model/text/gguf_vocab.h"

namespace pagoda::model {

namespace {

// HF's rotate_half row order -> ggml's adjacent pairs, per head of head_dim rows (llama.cpp's
// permute() in convert_hf_to_gguf.py): out row h*hd + 2i + s = in row h*hd + s*hd/2 + i.
void permute_rows(const uint8_t* in, uint8_t* out, int64_t n_heads, int64_t head_dim, size_t row_bytes) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t src = h * head_dim + s * half + i, dst = h * head_dim + 2 * i + s;
        std::memcpy(out + dst * row_bytes, in + src * row_bytes, row_bytes);
      }
    }
  }
}

// "blk.N.ffn_gate_exps.E.weight" (hf_checkpoint.cpp's name for one expert's tensor).
bool is_expert_tensor(const std::string& name) {
  const size_t exps = name.find("_exps.");
  return exps != std::string::npos && name.compare(exps + 6, std::string::npos, "weight") != 0;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<GgufFile> gguf_from_hf(const HfCheckpoint& checkpoint, const HfTokenizer& tokenizer,
                              const ConvertProgress& progress) {
  const ModelConfig& m = checkpoint.config().model;
  GgufFile out = checkpoint.metadata();
  const std::string a = m.arch_name + ".";
  out.erase("pagoda.rope.freq_factors");  // llama.cpp reads them as a tensor (below)
  // llama.cpp reads the hyperparameters as u32 (an i64 is "wrong type").
  for (const char* key : {"embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
                          "attention.key_length", "attention.value_length", "feed_forward_length", "vocab_size",
                          "context_length", "rope.dimension_count", "attention.sliding_window", "expert_count",
                          "expert_used_count", "expert_feed_forward_length"}) {
    if (std::optional<int64_t> v = out.get_int(a + key)) out.set(a + key, GgufValue::of_u32(static_cast<uint32_t>(*v)));
  }
  if (out.get_int(a + "attention.key_length")) {
    out.set(a + "attention.value_length", GgufValue::of_u32(static_cast<uint32_t>(m.head_dim)));
  }
  if (m.rope.freq_scale != 1.0f) out.set(a + "rope.scaling.factor", GgufValue::of_f32(1.0f / m.rope.freq_scale));
  // Embedding rows past the tokenizer (Qwen: 151669 tokens, 151936 rows) get [PAD{id}] tokens of
  // type UNUSED, as llama.cpp's converter writes them: llama.cpp wants one token per row.
  Vocab vocab = tokenizer.tokenizer.vocab();
  if (static_cast<int64_t>(vocab.tokens.size()) > m.n_vocab) {
    return Status::invalid_argument(checkpoint.dir() + ": the tokenizer has " + std::to_string(vocab.tokens.size()) +
                                    " tokens, more than the model's " + std::to_string(m.n_vocab) + " embedding rows");
  }
  for (int64_t id = static_cast<int64_t>(vocab.tokens.size()); id < m.n_vocab; ++id) {
    vocab.tokens.push_back("[PAD" + std::to_string(id) + "]");
    vocab.types.push_back(TokenType::kUnused);
    vocab.scores.push_back(0.0f);
  }
  vocab_to_gguf(vocab, out);
  if (!tokenizer.chat_template.empty()) out.set("tokenizer.chat_template", GgufValue::of_string(tokenizer.chat_template));
  for (int32_t id : tokenizer.eos_ids) {
    if (id != tokenizer.tokenizer.eos_id()) {
      out.set("tokenizer.ggml.eot_token_id", GgufValue::of_u32(static_cast<uint32_t>(id)));
      break;
    }
  }
  const bool permute = arch::info(m.arch).convert_permutes_qk;
  int64_t total = 0, done = 0;
  for (const auto& [name, t] : checkpoint.tensors()) {
    auto bytes = ggml_tensor_bytes(t.dims, t.dtype ? ggml_type_from_dtype(*t.dtype) : kGgmlTypeF32);
    if (bytes.is_ok()) total += static_cast<int64_t>(*bytes);
  }
  uint32_t file_type = 0;  // llama.cpp's LLAMA_FTYPE: 0 all F32, 1 mostly F16, 32 mostly BF16
  for (const auto& [name, t] : checkpoint.tensors()) {
    if (is_expert_tensor(name)) continue;  // stacked below
    if (!t.dtype || (*t.dtype != DType::kF32 && *t.dtype != DType::kF16 && *t.dtype != DType::kBF16)) {
      return Status::invalid_argument(checkpoint.dir() + ": tensor " + name + " is " + t.type_name +
                                      "; the converter writes F32, F16 and BF16 weights");
    }
    const uint32_t source_type = ggml_type_from_dtype(*t.dtype);
    // 1-D tensors (norms, biases) are F32, as llama.cpp's converter writes them (its CPU ops add
    // no BF16 bias); matrices keep their type.
    const bool vector = t.dims.size() == 1;
    const uint32_t type = vector ? kGgmlTypeF32 : source_type;
    if (!vector && type != kGgmlTypeF32) file_type = type == kGgmlTypeF16 ? 1 : 32;
    PAGODA_ASSIGN_OR_RETURN(uint64_t bytes, ggml_tensor_bytes(t.dims, type));
    PAGODA_ASSIGN_OR_RETURN(uint8_t * dst, out.add_tensor_uninitialized(name, t.dims, type));
    const bool q = ends_with(name, ".attn_q.weight"), k = ends_with(name, ".attn_k.weight");
    if (vector && source_type != kGgmlTypeF32) {
      kernels::dequantize_row(*t.dtype, t.data, reinterpret_cast<float*>(dst), t.dims[0]);
    } else if (permute && (q || k) && t.dims.size() == 2) {
      const int64_t heads = q ? m.n_head : m.n_kv_head;
      if (t.dims[1] != heads * m.head_dim || m.head_dim % 2 != 0) {
        return Status::invalid_argument(checkpoint.dir() + ": " + name + " has " + std::to_string(t.dims[1]) +
                                        " rows, not heads x head_dim = " + std::to_string(heads * m.head_dim));
      }
      permute_rows(t.data, dst, heads, m.head_dim, static_cast<size_t>(bytes / static_cast<uint64_t>(t.dims[1])));
    } else {
      std::memcpy(dst, t.data, bytes);
    }
    done += static_cast<int64_t>(bytes);
    if (progress) progress(done, total);
  }
  // Experts: HF keeps one tensor per expert, llama.cpp one 3-D tensor per layer and weight
  // ({n_in, n_out, n_expert}, expert 0 first).
  for (int64_t l = 0; m.is_moe() && l < m.n_layer; ++l) {
    for (const char* weight : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      const std::string stem = "blk." + std::to_string(l) + "." + weight;
      const TensorRef* first = nullptr;
      std::vector<const TensorRef*> parts;
      for (int64_t e = 0; e < m.n_expert; ++e) {
        auto it = checkpoint.tensors().find(stem + "." + std::to_string(e) + ".weight");
        if (it == checkpoint.tensors().end()) {
          return Status::invalid_argument(checkpoint.dir() + ": missing expert " + std::to_string(e) + " of " + stem);
        }
        const TensorRef& t = it->second;
        if (first == nullptr) first = &t;
        if (t.dims != first->dims || t.dtype != first->dtype) {
          return Status::invalid_argument(checkpoint.dir() + ": the experts of " + stem + " differ in shape or type");
        }
        parts.push_back(&t);
      }
      const uint32_t type = ggml_type_from_dtype(*first->dtype);
      PAGODA_ASSIGN_OR_RETURN(uint64_t bytes, ggml_tensor_bytes(first->dims, type));
      std::vector<int64_t> dims = first->dims;
      dims.push_back(m.n_expert);
      PAGODA_ASSIGN_OR_RETURN(uint8_t * dst, out.add_tensor_uninitialized(stem + ".weight", dims, type));
      for (size_t e = 0; e < parts.size(); ++e) std::memcpy(dst + e * bytes, parts[e]->data, bytes);
      if (type != kGgmlTypeF32) file_type = type == kGgmlTypeF16 ? 1 : 32;
    }
  }
  if (!m.rope.freq_factors.empty()) {
    const std::vector<float>& f = m.rope.freq_factors;
    PAGODA_RETURN_IF_ERROR(out.add_tensor("rope_freqs.weight", {static_cast<int64_t>(f.size())}, kGgmlTypeF32, f.data(),
                                          f.size() * sizeof(float)));
  }
  out.set("general.file_type", GgufValue::of_u32(file_type));
  return out;
}

}  // namespace pagoda::model
