#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "model/llama_model.h"
#include "model/weight_binding.h"

namespace pagoda::model {

Result<std::vector<kernels::WeightView>> bind_experts(const TensorTable& tensors, const std::string& name,
                                                      int64_t n_expert, int64_t n_out, int64_t n_in) {
  constexpr std::string_view kSuffix = ".weight";
  const std::string stem = name.substr(0, name.size() - kSuffix.size());  // blk.N.ffn_gate_exps
  if (!tensors.contains(name) && tensors.contains(stem + ".0.weight")) {  // one tensor per expert (HF)
    std::vector<kernels::WeightView> experts;
    for (int64_t e = 0; e < n_expert; ++e) {
      PAGODA_ASSIGN_OR_RETURN(kernels::WeightView w, bind_matrix(tensors, stem + "." + std::to_string(e) + ".weight", n_out, n_in));
      experts.push_back(w);
    }
    return experts;
  }
  PAGODA_ASSIGN_OR_RETURN(const TensorRef* t, find_tensor(tensors, name, {n_in, n_out, n_expert}));
  if (n_in % dtype_info(*t->dtype).block_elems != 0) {
    return Status::error("tensor '" + name + "': row of " + std::to_string(n_in) + " is not a whole number of " +
                         std::string(dtype_name(*t->dtype)) + " blocks");
  }
  std::vector<kernels::WeightView> experts(static_cast<size_t>(n_expert));
  const size_t expert_bytes = dtype_row_bytes(*t->dtype, n_in) * static_cast<size_t>(n_out);
  for (int64_t e = 0; e < n_expert; ++e) {
    kernels::WeightView& w = experts[static_cast<size_t>(e)];
    w.data = t->data == nullptr ? nullptr : t->data + static_cast<size_t>(e) * expert_bytes;
    w.dtype = *t->dtype;
    w.n_out = n_out;
    w.n_in = n_in;
  }
  return experts;
}

Status bind_ffn(const TensorTable& f, const ModelConfig& c, int64_t l, LayerWeights& w) {
  const std::string p = "blk." + std::to_string(l) + ".";
  if (!c.is_moe_layer(l)) {
    PAGODA_ASSIGN_OR_RETURN(w.w_gate, bind_matrix(f, p + "ffn_gate.weight", c.n_ff, c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.w_up, bind_matrix(f, p + "ffn_up.weight", c.n_ff, c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.w_down, bind_matrix(f, p + "ffn_down.weight", c.n_embd, c.n_ff));
    return Status::ok();
  }
  PAGODA_ASSIGN_OR_RETURN(w.w_router, bind_matrix(f, p + "ffn_gate_inp.weight", c.n_expert, c.n_embd));
  if (f.contains(p + "exp_probs_b.bias")) {
    PAGODA_ASSIGN_OR_RETURN(w.expert_bias, load_vector(f, p + "exp_probs_b.bias", c.n_expert));
  }
  PAGODA_ASSIGN_OR_RETURN(w.w_gate_exp, bind_experts(f, p + "ffn_gate_exps.weight", c.n_expert, c.n_ff_exp, c.n_embd));
  PAGODA_ASSIGN_OR_RETURN(w.w_up_exp, bind_experts(f, p + "ffn_up_exps.weight", c.n_expert, c.n_ff_exp, c.n_embd));
  PAGODA_ASSIGN_OR_RETURN(w.w_down_exp, bind_experts(f, p + "ffn_down_exps.weight", c.n_expert, c.n_embd, c.n_ff_exp));
  if (c.n_expert_shared > 0) {
    const int64_t ff = c.n_ff_shexp();
    PAGODA_ASSIGN_OR_RETURN(w.w_gate_shexp, bind_matrix(f, p + "ffn_gate_shexp.weight", ff, c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.w_up_shexp, bind_matrix(f, p + "ffn_up_shexp.weight", ff, c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.w_down_shexp, bind_matrix(f, p + "ffn_down_shexp.weight", c.n_embd, ff));
  }
  return Status::ok();
}

void route_tokens(const float* logits, int64_t T, int64_t n_expert, int64_t k, const ExpertRouting& rule,
                  const float* bias, double* scratch, int32_t* ids, float* weights) {
  CHECK(k >= 1 && k <= n_expert);
  const int64_t E = n_expert, G = rule.n_groups, per_group = E / G;
  double* p = scratch;          // [E] probabilities
  double* s = scratch + E;      // [E] selection scores (-inf: excluded by its group)
  double* group = scratch + 2 * E;  // [G] group scores
  constexpr double kExcluded = -std::numeric_limits<double>::infinity();
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    if (rule.gating == ExpertGating::kSoftmax) {
      double top = l[0], sum = 0;
      for (int64_t e = 1; e < E; ++e) top = std::max(top, static_cast<double>(l[e]));
      for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(static_cast<double>(l[e]) - top));
      for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) p[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
    }
    for (int64_t e = 0; e < E; ++e) s[e] = p[e] + (bias != nullptr ? bias[e] : 0.0f);
    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {  // the sum of the group's two best
        double first = kExcluded, second = kExcluded;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (s[e] > first) second = first, first = s[e];
          else if (s[e] > second) second = s[e];
        }
        group[g] = first + second;
      }
      for (int64_t kept = 0; kept < rule.n_groups_used; ++kept) {  // mark the best groups +inf
        int64_t best = -1;
        for (int64_t g = 0; g < G; ++g) {
          if (std::isinf(group[g]) && group[g] > 0) continue;
          if (best < 0 || group[g] > group[best]) best = g;
        }
        group[best] = std::numeric_limits<double>::infinity();
      }
      for (int64_t g = 0; g < G; ++g) {
        if (std::isinf(group[g]) && group[g] > 0) continue;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) s[e] = kExcluded;
      }
    }
    // Top-k by selection score, ties to the lower id: a partial insertion sort.
    int64_t n = 0;
    for (int32_t e = 0; e < E; ++e) {
      if (s[e] == kExcluded || (n == k && !(s[e] > s[id[k - 1]]))) continue;
      int64_t i = n < k ? n++ : k - 1;
      while (i > 0 && s[e] > s[id[i - 1]]) {
        id[i] = id[i - 1];
        --i;
      }
      id[i] = e;
    }
    CHECK_EQ(n, k);  // validate_config: the kept groups hold at least k experts
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += p[id[i]];
    const double norm = rule.normalize ? 1.0 / std::max(sum, 6.103515625e-5) : 1.0;
    for (int64_t i = 0; i < k; ++i) w[i] = static_cast<float>(p[id[i]] * norm * rule.scale);
  }
}

void ForwardPass::feed_forward_moe(const LayerWeights& w, int64_t l, int64_t T) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.n_embd, ff = c.n_ff_exp, E = c.n_expert, k = c.n_expert_used;
  float* x = x_.data();
  float* h = xb_.data();  // [T, d] the normed input
  kernels::rmsnorm(x, w.ffn_norm.data(), h, T, d, c.rms_eps);
  matmul_.run(w.w_router, h, T, router_.data());
  route_tokens(router_.data(), T, E, k, c.routing, w.expert_bias.empty() ? nullptr : w.expert_bias.data(),
               route_scratch_.data(), route_ids_.data(), route_weights_.data());
  // Counting sort of the (token, slot) pairs by expert: expert e's rows are
  // expert_rows_[expert_begin_[e] .. expert_begin_[e + 1]).
  std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
  for (int64_t i = 0; i < T * k; ++i) ++expert_begin_[static_cast<size_t>(route_ids_[i]) + 1];
  int64_t* routed = expert_tokens_.data() + l * E;
  for (int64_t e = 0; e < E; ++e) routed[e] += expert_begin_[e + 1];
  for (int64_t e = 0; e < E; ++e) expert_begin_[e + 1] += expert_begin_[e];
  std::copy(expert_begin_.begin(), expert_begin_.end() - 1, expert_fill_.begin());
  for (int64_t i = 0; i < T * k; ++i) expert_rows_[expert_fill_[route_ids_[i]]++] = static_cast<int32_t>(i);
  std::fill(moe_acc_.begin(), moe_acc_.begin() + T * d, 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = expert_begin_[e], n = expert_begin_[e + 1] - begin;
    if (n == 0) continue;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t token = expert_rows_[begin + r] / k;
      std::copy(h + token * d, h + (token + 1) * d, moe_in_.data() + r * d);
    }
    matmul_.run(w.w_gate_exp[e], moe_in_.data(), n, gate_.data());
    matmul_.run(w.w_up_exp[e], moe_in_.data(), n, up_.data());
    pool_.parallel_for(n * ff, [&](int64_t b, int64_t end, int) {
      kernels::silu_mul(gate_.data() + b, up_.data() + b, end - b, isa_);
    }, 1024);
    matmul_.run(w.w_down_exp[e], gate_.data(), n, moe_out_.data());
    for (int64_t r = 0; r < n; ++r) {
      const int64_t slot = expert_rows_[begin + r], token = slot / k;
      const float weight = route_weights_[slot];
      float* acc = moe_acc_.data() + token * d;
      const float* y = moe_out_.data() + r * d;
      for (int64_t i = 0; i < d; ++i) acc[i] += weight * y[i];
    }
  }
  if (c.n_expert_shared > 0) {  // the shared experts: one SwiGLU every token runs, unweighted
    const int64_t ff_sh = c.n_ff_shexp();
    matmul_.run(w.w_gate_shexp, h, T, gate_.data());
    matmul_.run(w.w_up_shexp, h, T, up_.data());
    pool_.parallel_for(T * ff_sh, [&](int64_t b, int64_t end, int) {
      kernels::silu_mul(gate_.data() + b, up_.data() + b, end - b, isa_);
    }, 1024);
    matmul_.run(w.w_down_shexp, gate_.data(), T, moe_out_.data());
    kernels::add_inplace(moe_acc_.data(), moe_out_.data(), T * d);
  }
  kernels::add_inplace(x, moe_acc_.data(), T * d);
}

}  // namespace pagoda::model
