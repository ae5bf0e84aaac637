// Mixture-of-experts FFN (qwen3moe; ModelConfig::is_moe): the routing rule and the binding of
// expert tensors. The forward pass (ForwardPass::feed_forward_moe, moe.cpp) per layer:
//
//   h = rmsnorm(x)                                   [T, n_embd]
//   p = softmax(h Wrouter)                           [T, n_expert]     (ffn_gate_inp)
//   E(t) = the n_expert_used largest p[t] (ties: the lower expert id), w_e = p[t, e] / sum over E(t)
//   x[t] += sum over e in E(t) of w_e * (silu(h[t] Wgate_e) * (h[t] Wup_e)) Wdown_e
//
// as llama.cpp's build_moe_ffn computes it for qwen3moe (softmax gating, normalized weights).
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

namespace pagoda::model {

// The experts of a 3-D tensor `name` ("blk.N.ffn_gate_exps.weight") of dims {n_in, n_out,
// n_expert} (GGUF order), or of one [n_out, n_in] tensor per expert named
// "blk.N.ffn_gate_exps.E.weight" (a Hugging Face folder): n_expert matrices, used in place.
Result<std::vector<kernels::WeightView>> bind_experts(const TensorTable& tensors, const std::string& name,
                                                      int64_t n_expert, int64_t n_out, int64_t n_in);

// The routing rule above for T tokens: logits [T, n_expert] -> ids [T, k] (most probable
// first) and weights [T, k] (summing to 1 per token). The scalar reference is itself: plain
// loops, softmax in double.
void route_tokens(const float* logits, int64_t T, int64_t n_expert, int64_t k, int32_t* ids, float* weights);

}  // namespace pagoda::model
