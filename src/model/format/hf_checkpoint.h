// HfCheckpoint: a Hugging Face model folder opened for inference.
//
//   DIR/config.json                       hyperparameters (model/format/hf_config.h)
//   DIR/model.safetensors                 the weights, or
//   DIR/model.safetensors.index.json      {"weight_map": {"tensor name": "shard file", ...}}
//   DIR/<shard>.safetensors ...           with the shards it names (plain names inside DIR)
//
// Every safetensors file is mapped and validated (model/format/safetensors.h); the tensors Pagoda
// knows are entered in a TensorTable under their GGUF names, with dims reversed to GGUF
// order, pointing into the mapping: F32/F16/BF16 weights are computed on in place. (The
// matmul kernels read all three; a tensor whose offset is not a multiple of its element size
// is the one exception, copied into owned aligned memory.) Shapes are checked against the
// config when LlamaModel binds them. Tokenizer files are not read here.
//
// Name map (N = layer):
//   model.embed_tokens.weight -> token_embd.weight     lm_head.weight -> output.weight
//   model.norm.weight -> output_norm.weight
//   model.layers.N.input_layernorm.weight -> blk.N.attn_norm.weight
//   model.layers.N.post_attention_layernorm.weight -> blk.N.ffn_norm.weight
//   model.layers.N.self_attn.{q,k,v}_proj.{weight,bias} -> blk.N.attn_{q,k,v}.{weight,bias}
//   model.layers.N.self_attn.o_proj.weight -> blk.N.attn_output.weight
//   model.layers.N.self_attn.{q,k}_norm.weight -> blk.N.attn_{q,k}_norm.weight
//   model.layers.N.mlp.{gate,up,down}_proj.weight -> blk.N.ffn_{gate,up,down}.weight
// *.rotary_emb.inv_freq is skipped (recomputed from config.json); any other name is an error
// (an o_proj bias, say, would otherwise be silently dropped).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "model/format/gguf.h"
#include "model/format/hf_config.h"
#include "model/format/safetensors.h"
#include "model/format/tensor_table.h"

namespace pagoda::model {

// The GGUF name of a Hugging Face tensor name, or nullopt for names not in the map.
std::optional<std::string> gguf_name_from_hf(std::string_view hf_name, bool four_norms = false);

// True if `path` is a folder holding config.json.
bool is_hf_model_dir(const std::string& path);

class HfCheckpoint {
 public:
  static Result<HfCheckpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const HfConfig& config() const { return config_; }
  const TensorTable& tensors() const { return tensors_; }  // by GGUF name
  const std::vector<SafetensorsFile>& files() const { return files_; }
  int64_t num_copied_tensors() const { return static_cast<int64_t>(copies_.size()); }
  // FNV-1a over every used tensor's name, type, shape and first and last 256 bytes.
  uint64_t weights_digest() const { return weights_digest_; }
  // The config as GGUF metadata, no tensors: general.architecture, general.name, the
  // {arch}.* hyperparameter keys, pagoda.source = "huggingface" and
  // pagoda.weights_digest. What `LlamaModel::file()` shows for a folder (and what the
  // engine's prefix-cache fingerprint hashes). Not a runnable GGUF: HF RoPE is NeoX-style.
  GgufFile metadata() const;

 private:
  Status add_file(SafetensorsFile file, const std::vector<std::string>* only);
  std::string dir_;
  HfConfig config_;
  std::vector<SafetensorsFile> files_;  // mapped; tensors_ points into them
  std::vector<AlignedBuffer> copies_;   // misaligned tensors, copied
  TensorTable tensors_;
  uint64_t weights_digest_ = 0;
};

}  // namespace pagoda::model
