// Gemma 3 (GGUF `gemma3`, as llama.cpp's converter writes it): the family's hyperparameters,
// a random-weight file writer for tests and benchmarks, and (gemma3_forward.cpp) its forward
// pass. The arithmetic, per layer l (x the residual stream [T, n_embd]):
//
//   x = embed(tokens) * sqrt(n_embd)
//   h = rmsnorm(x, attn_norm); q, k, v = h Wq, h Wk, h Wv
//   q, k = rmsnorm of each head (attn_q_norm / attn_k_norm); rope (NeoX halves), with
//          rope.freq_base_swa (default 10000, unscaled) on a sliding layer and the file's base
//          and scaling on a global one
//   store k, v; a = attention(q * attn_scale) over the last `window` positions on a sliding
//          layer, all of them on a global one
//   x += rmsnorm(a Wo, post_attention_norm)
//   h = rmsnorm(x, ffn_norm); x += rmsnorm((gelu_tanh(h Wgate) * (h Wup)) Wdown, post_ffw_norm)
//   logits = rmsnorm(x, output_norm) Wout (tied to token_embd unless output.weight exists);
//            cap * tanh(logits / cap) when final_logit_softcapping is set
//
// Norm weights are used as stored: llama.cpp's converter has already added Gemma's +1.
// Which layers slide: attention.sliding_window_pattern (an integer n, layer i sliding unless
// (i + 1) % n == 0, or n_layer bools), default 6; without attention.sliding_window every layer
// is global. attn_scale is 1 / sqrt(head_dim), except 1 / sqrt(n_embd / n_head) for the
// 62-layer (27B) model, as llama.cpp and Google's reference decide it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/format/gguf.h"
#include "model/model_config.h"

namespace pagoda::model {

struct ModelShape;
struct WeightMix;

namespace arch {

// The gemma3 keys over the common ones config_from_gguf has read (p = "gemma3.").
Status read_gemma3_gguf(const GgufFile& file, const std::string& p, ModelConfig& config);

// What both readers (GGUF, config.json) set from the family's own values: the window of the
// sliding layers (sliding: [n_layer], empty: every layer; window 0: none slides), the local
// RoPE base, the final soft-cap (0: none), the embedding scale, norms, GeGLU, attn_scale.
Status finish_gemma3_config(ModelConfig& config, int64_t window, const std::vector<bool>& sliding, double base_swa,
                            double softcap);

// The width whose 1/sqrt scales the queries: n_embd / n_head for the 62-layer (27B) model,
// head_dim otherwise (llama.cpp; Google's query_pre_attn_scalar).
inline int64_t gemma3_attn_scale_width(const ModelConfig& c) { return c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim; }

// A random gemma3 file of `shape` (head_dim, sliding_window and sliding_pattern from the shape;
// norm weights random in [0.5, 1.5] so that every norm matters; tied output unless
// shape.untied_output).
Result<GgufFile> make_random_gemma3_model(const ModelShape& shape, const WeightMix& mix, uint64_t seed,
                                          const std::function<void(int64_t, int64_t)>& progress);

}  // namespace arch
}  // namespace pagoda::model
