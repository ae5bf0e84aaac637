// Mixture-of-experts FFN (qwen3moe, deepseek2; ModelConfig::is_moe_layer): the routing rule
// and the binding of expert tensors. The forward pass (ForwardPass::feed_forward_moe, moe.cpp)
// of a MoE layer:
//
//   h = rmsnorm(x)                                   [T, n_embd]
//   l = h Wrouter                                    [T, n_expert]     (ffn_gate_inp)
//   p = softmax(l) or sigmoid(l)                     (ExpertRouting::gating)
//   s = p + bias                                     (exp_probs_b, selection only; else s = p)
//   groups (n_groups > 1): rank each group by the sum of its two largest s, keep the
//     n_groups_used best, the other groups' experts cannot be picked
//   E(t) = the n_expert_used largest s[t] (ties: the lower expert id)
//   w_e = p[t, e], divided by max(sum over E(t), 2^-14) when normalize, times scale
//   x[t] += sum over e in E(t) of w_e * (silu(h[t] Wgate_e) * (h[t] Wup_e)) Wdown_e
//         + (silu(h[t] Wgate_sh) * (h[t] Wup_sh)) Wdown_sh          (shared experts, if any)
//
// as llama.cpp's build_moe_ffn computes it (qwen3moe: softmax, normalized; DeepSeek-V2:
// softmax, not normalized, 2 shared experts; DeepSeek-V3: sigmoid, bias, 8 groups of which 4,
// normalized, scale 2.5, 1 shared expert).
// Tokens are grouped by expert: each selected expert gathers its rows, runs one matmul per
// weight on them (the decode kernels for one row, the GEMMs for many) and scatters its rows
// back weighted, experts in id order, so only the selected experts' weights are read. The
// scratch is sized once (ForwardPass); nothing is allocated per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/matmul.h"
#include "model/format/tensor_table.h"
#include "model/model_config.h"

namespace pagoda::model {

// The experts of a 3-D tensor `name` ("blk.N.ffn_gate_exps.weight") of dims {n_in, n_out,
// n_expert} (GGUF order), or of one [n_out, n_in] tensor per expert named
// "blk.N.ffn_gate_exps.E.weight" (a Hugging Face folder): n_expert matrices, used in place.
Result<std::vector<kernels::WeightView>> bind_experts(const TensorTable& tensors, const std::string& name,
                                                      int64_t n_expert, int64_t n_out, int64_t n_in);

struct LayerWeights;

// Layer l's FFN weights ("blk.N."): a MoE layer's router, optional selection bias
// (exp_probs_b.bias), experts and shared experts (ffn_*_shexp) when config.is_moe_layer(l),
// else the dense ffn_gate / ffn_up / ffn_down of n_ff.
Status bind_ffn(const TensorTable& tensors, const ModelConfig& config, int64_t l, LayerWeights& w);

// The routing rule above for T tokens: logits [T, n_expert] -> ids [T, k] (largest selection
// score first) and weights [T, k]. bias: [n_expert] or nullptr. scratch: [3 * n_expert]. The
// scalar reference is itself: plain loops, probabilities in double.
void route_tokens(const float* logits, int64_t T, int64_t n_expert, int64_t k, const ExpertRouting& rule,
                  const float* bias, double* scratch, int32_t* ids, float* weights);

}  // namespace pagoda::model
