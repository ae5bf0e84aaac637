// ModelConfig: the hyperparameters of a decoder-only transformer, read from GGUF metadata
// ("{arch}.embedding_length" etc.) or a Hugging Face config.json (model/format/hf_config.h) and
// validated once (validate_config).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"

namespace pagoda::model {

class GgufFile;

enum class Arch { kLlama, kQwen2, kQwen3, kDeepseek2, kGemma3, kQwen3Moe };

// How a mixture-of-experts layer weighs its experts for a token (model/moe.h has the rule):
// gating turns router logits into probabilities (softmax, qwen3moe and DeepSeek-V2; sigmoid,
// DeepSeek-V3 and Kimi K2), a per-expert bias (exp_probs_b) shifts only the selection, experts
// are picked within the n_group_used best of n_groups groups (DeepSeek-V3; 1: no groups), and the
// picked probabilities are renormalized to sum to 1 (normalize) and multiplied by scale.
// GGUF: {arch}.expert_gating_func (1 softmax, 2 sigmoid), expert_weights_norm,
// expert_weights_scale, expert_group_count, expert_group_used_count.
enum class ExpertGating { kSoftmax, kSigmoid };
struct ExpertRouting {
  ExpertGating gating = ExpertGating::kSoftmax;
  bool normalize = true;
  float scale = 1.0f;
  int64_t n_groups = 1;
  int64_t n_groups_used = 1;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;     // "llama", "qwen2", "qwen3", "deepseek2", "gemma3"
  std::string name;          // general.name, if any
  int64_t n_embd = 0;        // model width
  int64_t n_layer = 0;
  int64_t n_head = 0;        // query heads
  int64_t n_kv_head = 0;     // K/V heads (GQA when < n_head, MQA when 1)
  int64_t head_dim = 0;
  int64_t n_ff = 0;          // SwiGLU / GeGLU hidden width
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;   // context length the model was trained with
  float rms_eps = 1e-5f;
  kernels::RopeParams rope;  // style, head_dim, rot_dim, freq_base, freq_scale
  bool has_qkv_bias = false;
  bool has_qk_norm = false;  // qwen3: RMSNorm over each q and k head (weights [head_dim]) before RoPE
  // {arch}.attention.sliding_window; 0 if absent. > 0: every layer attends only to the last
  // sliding_window positions (position p sees t with p - t < sliding_window).
  int64_t sliding_window = 0;
  // Interleaved sliding-window layers (Gemma 3): [n_layer] the window of each layer, 0 for a
  // global one; empty: every layer follows sliding_window. The cache keeps every layer's blocks
  // (sliding_window stays 0); the attention mask applies each layer's window.
  std::vector<int64_t> layer_window;
  kernels::RopeParams rope_local;   // RoPE of the layers with a window (Gemma 3: base 10000, unscaled)
  // Gemma 3's layer: the embedding times embed_scale (sqrt(n_embd)), a norm after attention and
  // after the FFN (post_norms) before each residual add, a GeGLU FFN (gelu(tanh) instead of
  // silu), and the logits soft-capped to final_logit_softcap x tanh(z / cap) when > 0.
  float embed_scale = 0.0f;         // 0: none
  bool post_norms = false;
  bool geglu = false;
  float final_logit_softcap = 0.0f; // 0: none
  bool has_layer_windows() const { return !layer_window.empty(); }
  int64_t window_of(int64_t l) const { return layer_window.empty() ? sliding_window : layer_window[l]; }

  // MLA (deepseek2, kv_lora_rank > 0): head_dim = qk_nope_dim + qk_rope_dim is the query/key
  // head width, rope.rot_dim = qk_rope_dim, n_kv_head = n_head (the decompressed heads). The
  // cache holds one latent row of kv_lora_rank + qk_rope_dim per token and layer.
  int64_t q_lora_rank = 0;   // 0: plain attn_q
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  float attn_scale = 0.0f;   // softmax scale; 0: 1 / sqrt(head_dim) (MLA with YaRN: x mscale^2)

  // Cross-layer KV sharing (CLA / YOCO-style; GGUF {arch}.attention.kv_source_layer, [n_layer]
  // ints): layer l attends over the K/V of layer kv_source_layer[l] <= l, whose own source is
  // itself, and has no K/V weights of its own unless it is a source. Empty: every layer owns KV.
  std::vector<int32_t> kv_source_layer;
  // [n_layer] the index among the source layers (the paged cache's layer) of l's K/V; empty
  // when nothing is shared.
  std::vector<int32_t> kv_cache_layer;

  // Mixture of experts (qwen3moe, deepseek2; model/moe.h): the FFN of layers n_dense_lead..
  // n_layer-1 is n_expert SwiGLU experts of width n_ff_exp, of which each token runs the
  // n_expert_used that `routing` picks, plus n_expert_shared experts every token runs (one
  // SwiGLU of n_ff_exp * n_expert_shared). The first n_dense_lead layers have a dense FFN of
  // n_ff. n_expert 0: every layer dense.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_expert_shared = 0;
  int64_t n_dense_lead = 0;
  ExpertRouting routing = {};
  bool is_moe() const { return n_expert > 0; }
  bool is_moe_layer(int64_t l) const { return n_expert > 0 && l >= n_dense_lead; }
  int64_t n_ff_shexp() const { return n_ff_exp * n_expert_shared; }

  bool is_mla() const { return kv_lora_rank > 0; }
  bool owns_kv(int64_t l) const { return kv_source_layer.empty() || kv_source_layer[l] == l; }
  // Layers that own K/V blocks: n_layer unless layers share.
  int64_t n_kv_layers() const {
    return kv_cache_layer.empty() ? n_layer : kv_cache_layer.back() + 1;  // non-decreasing
  }
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  // The paged cache's geometry: MLA keeps one latent "head" of kv_lora_rank + qk_rope_dim, K only.
  int64_t kv_cache_heads() const { return is_mla() ? 1 : n_kv_head; }
  int64_t kv_cache_head_dim() const { return is_mla() ? kv_lora_rank + qk_rope_dim : head_dim; }
  // 2 x n_layer x n_kv_head x head_dim x elem_bytes (MLA: n_layer x latent width x elem_bytes)
  int64_t kv_bytes_per_token(int64_t elem_bytes) const {
    return is_mla() ? n_kv_layers() * kv_cache_head_dim() * elem_bytes : 2 * n_kv_layers() * kv_dim() * elem_bytes;
  }
};

// Which layers slide in a file with {arch}.attention.sliding_window: {arch}.attention.
// sliding_window_pattern as an integer n (layer i slides unless (i + 1) % n == 0, llama.cpp's
// set_swa_pattern) or n_layer bools; absent: the registry's default pattern for the
// architecture; none either: empty (every layer slides).
Result<std::vector<bool>> gguf_sliding_layers(const GgufFile& file, const std::string& arch, int64_t n_layer);
// [n_layer]: layer i slides unless (i + 1) % pattern == 0.
std::vector<bool> sliding_pattern(int64_t n_layer, int64_t pattern);

// Reads and validates the hyperparameters; the error names the missing or bad key.
// A tensor rope_freqs.weight ([rot_dim / 2] f32) becomes rope.freq_factors.
Result<ModelConfig> config_from_gguf(const GgufFile& file);

// Checks counts, head geometry and RoPE of a filled config (both readers end with it).
Status validate_config(const ModelConfig& config);

// Sets config.kv_source_layer and kv_cache_layer from a [n_layer] source map, or explains what
// is wrong with it (a source after its layer, a source that itself reads another layer).
Status set_kv_source_layers(ModelConfig& config, const std::vector<int64_t>& sources);

// Llama 3 rope scaling ("rope_type": "llama3") as per-pair frequency divisors [rot_dim / 2]
// for RopeParams::freq_factors. With wavelength w_i = 2 pi / (base^(-2i / rot_dim)),
// low = original_context / low_freq_factor and high = original_context / high_freq_factor:
// w_i < high: 1 (kept); w_i > low: factor; otherwise the inverse frequency is blended,
// (1 - s) / factor + s with s = (original_context / w_i - low_freq_factor) /
// (high_freq_factor - low_freq_factor), and the divisor is its reciprocal.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192;
};
Result<std::vector<float>> llama3_freq_factors(const Llama3RopeScaling& scaling, double freq_base, int64_t rot_dim);

// YaRN ("rope.scaling.type" = "yarn", as ggml's rope_yarn computes it with ext_factor 1) as
// per-pair frequency divisors [rot_dim / 2]: pair i keeps its frequency (extrapolation) when
// i <= low, is divided by `factor` (interpolation) when i >= high, and blends linearly between:
//   ramp_i = 1 - clamp((i - low) / max(0.001, high - low), 0, 1)
//   inv_freq_i = base^(-2i / rot_dim) x (ramp_i + (1 - ramp_i) / factor)
// with low = max(0, floor(d(beta_fast))), high = min(rot_dim - 1, ceil(d(beta_slow))),
// d(b) = rot_dim x ln(original_context / (b x 2 pi)) / (2 ln base). The cos/sin magnitude is
// left 1 (llama.cpp's deepseek2 cancels ggml's YaRN mscale); the softmax scale gets
// mscale^2 with mscale = 1 + log_multiplier x ln(factor) (yarn_attn_mscale).
struct YarnRopeScaling {
  double factor = 1.0;
  double original_context = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double log_multiplier = 0.0;  // {arch}.rope.scaling.yarn_log_multiplier (DeepSeek-V2: 0.0707)
};
Result<std::vector<float>> yarn_freq_factors(const YarnRopeScaling& scaling, double freq_base, int64_t rot_dim);
inline double yarn_attn_mscale(const YarnRopeScaling& s) { return 1.0 + s.log_multiplier * std::log(s.factor); }

}  // namespace pagoda::model
