// Random-weight models of named shapes (fixed seed), written as ordinary GGUF files so that
// benchmarks, tests and llama.cpp all load the same bytes. Also the built-in default model.
//
// Weights: uniform in [-a, a] with a = sqrt(3 / n_in) (unit-variance activations), norms 1.
// Vocab: SentencePiece-style with <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, "▁",
// printable ASCII, then synthetic multi-letter pieces up to the vocab size.
#pragma once

#include <functional>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/status.h"
#include "model/format/gguf.h"
#include "model/model_config.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {

struct ModelShape {
  std::string name;
  int64_t n_embd, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
  std::string arch = "llama";  // or "qwen2" (q/k/v biases, NeoX RoPE), "qwen3" (q/k norms, NeoX),
                               // "deepseek2" (MLA), "gemma3" (arch/gemma3.h)
  int64_t sliding_window = 0;  // > 0: written as {arch}.attention.sliding_window
  // deepseek2 only (n_kv_head is then n_head; n_embd need not be n_head x head dim): MLA with a
  // latent of kv_lora_rank, query/key heads of qk_nope_dim + qk_rope_dim, values of v_head_dim,
  // q LoRA when q_lora_rank > 0, YaRN when yarn_factor > 1 (original context n_ctx / factor).
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  double yarn_factor = 0;
  // > 1: cross-layer KV sharing, groups of `cla` layers reading the K/V of the group's first
  // ({arch}.attention.kv_source_layer; the others get no attn_k / attn_v). llama/qwen2 only.
  int64_t cla = 0;
  // gemma3: head width (0: n_embd / n_head), every `sliding_pattern`-th layer global and the
  // others sliding over `sliding_window` (written as attention.sliding_window_pattern), and
  // final_logit_softcapping when logit_softcap > 0.
  int64_t head_dim = 0;
  int64_t sliding_pattern = 0;
  float logit_softcap = 0.0f;
  // output_norm's weights times this (every family): > 1 peaks the next-token distribution of a
  // random model, so that engines compared by greedy tokens do not part at near-ties.
  float output_norm_scale = 1.0f;
  // gemma3 (tied by default): write its own output.weight. A tied random model keeps repeating
  // its last token, which makes greedy tokens a weak cross-check.
  bool untied_output = false;
  // qwen3moe: every layer's FFN is n_expert experts of n_ff_exp, n_expert_used per token
  // (model/moe.h); n_ff is then only the file's feed_forward_length.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  // deepseek2 experts (also n_expert ..., above): n_expert_shared shared experts, the first
  // n_dense_lead layers dense (n_ff), the routing rule, and a random selection bias
  // (exp_probs_b) per MoE layer when expert_bias.
  int64_t n_expert_shared = 0, n_dense_lead = 0;
  ExpertRouting routing = {};
  bool expert_bias = false;
};

// Known shapes: "default" (built in), "tiny" (tests), "tiny-qwen3", "llama-110m", "tinyllama-1.1b", Gemma 3
// ones: "tiny-gemma3" (tests) and "gemma3-270m" (Gemma 3 270M's layers with a 32000 vocab),
// "xc-llama", "xc-qwen3", "xc-mla", "xc-gemma3" (small layers, 32000 tokens: cross-checks), and MLA
// ones: "tiny-mla" (plain q), "tiny-mla-q" (q LoRA + YaRN), "dsv2-lite" (DeepSeek-V2-Lite's
// attention geometry with a dense FFN of its expert width) next to "dsv2-lite-gqa" (the same
// model with GQA, 4 kv heads of 128, for the capacity and speed comparison), and "dsv2-mini" /
// "dsv2-mini-gqa": the same layers, 4 of them (benchmarks on small machines); mixture of experts:
// "tiny-qwen3moe" (tests: 8 experts, 2 per token), "xc-qwen3moe" (cross-checks: 16, 4),
// "qwen3moe-1b" (benchmarks: 64 experts, 8 per token); DeepSeek MoE on MLA, the first layer
// dense: "tiny-dsv2moe" / "xc-dsv2moe" (DeepSeek-V2's rule: softmax, not renormalized, shared
// experts) and "tiny-dsv3moe" / "xc-dsv3moe" (V3's: sigmoid, selection bias, groups,
// renormalized, scale 2.5, one shared expert), and "dsv2-lite-moe" (DeepSeek-V2-Lite whole:
// 64 experts of 1408, 6 per token, 2 shared, layer 0 dense; benchmarks).
const std::vector<ModelShape>& model_shapes();
Result<ModelShape> find_model_shape(const std::string& name);

// A byte-level SPM vocab of n_vocab tokens (n_vocab >= 260).
Vocab make_synthetic_vocab(int64_t n_vocab);

// The storage type of each 2-D weight: one dtype for all, or one of llama.cpp's k-quant mixes.
//   "f32" .. "q6_k"  every 2-D weight in that dtype (llama.cpp's --pure)
//   "q4_k_m", "q5_k_m"  llama.cpp's Q4_K_M / Q5_K_M rules (llama_tensor_get_type): Q4_K / Q5_K,
//     but Q6_K for output.weight and for attn_v / ffn_down of the "more bits" layers (the
//     first n/8, the last n/8 and every third in between: i < n/8 || i >= 7n/8 ||
//     (i - n/8) % 3 == 2).
// A weight whose rows (n_in) are not a multiple of 256 cannot be a k-quant: it falls back to
// Q8_0 (llama.cpp: Q6_K -> Q8_0 as here, but Q4_K -> Q5_0 and Q5_K -> Q5_1, which Pagoda does
// not compute with). Expert routers (ffn_gate_inp) stay F32 in every mix, as llama.cpp's
// quantizer leaves them.
struct WeightMix {
  std::string name;
  DType base = DType::kF32;  // every 2-D weight the rules below do not name
  bool k_m = false;          // the _K_M rules above
  uint32_t file_type = 0;    // general.file_type (llama.cpp's llama_ftype)
};
Result<WeightMix> find_weight_mix(const std::string& name);  // the names above
// The dtype of 2-D weight `tensor` ("output.weight", "blk.3.attn_v.weight", ...) with rows of
// n_in values, in a model of n_layer layers.
DType weight_dtype(const WeightMix& mix, const std::string& tensor, int64_t n_in, int64_t n_layer);

// Builds the model in memory. 2-D weights use `dtype` (or `mix`); norms are f32.
Result<GgufFile> make_random_model(const ModelShape& shape, DType dtype, uint64_t seed = 1234);
// progress(layers done, n_layer + 2), when given, after the embedding, each layer and the output.
Result<GgufFile> make_random_model(const ModelShape& shape, const WeightMix& mix, uint64_t seed = 1234,
                                   const std::function<void(int64_t done, int64_t total)>& progress = nullptr);

// Writers' building blocks (also model/arch/ families): a random [n_out, n_in] weight stored as
// `dtype` (uniform in +-sqrt(3 / n_in)), and an f32 vector uniform in [lo, hi].
// The keys every random file starts with: general.architecture, .name, .file_type and ARCH.
// context_length, embedding_length, block_count, feed_forward_length.
GgufFile random_model_header(const std::string& arch, const ModelShape& shape, const WeightMix& mix);
Status add_random_matrix(GgufFile& file, const std::string& name, int64_t n_out, int64_t n_in, DType dtype, Rng& rng);
Status add_random_f32(GgufFile& file, const std::string& name, int64_t n, float lo, float hi, Rng& rng);

// The built-in default model ("default" shape, f32, seed 1234).
Result<GgufFile> make_default_model();

}  // namespace pagoda::model
