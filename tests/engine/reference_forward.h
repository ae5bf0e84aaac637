// A float64 forward pass of llama/qwen2/qwen3/qwen3moe models (and the FFN, dense or mixture of
// experts, that the MLA reference in mla_forward_test shares) with plain loops and a contiguous KV cache
// (the reference of forward_reference_test, engine_window_test and hf_forward_test), with
// sliding-window masks, StreamingLLM cache eviction, qwen3 q/k norms and any RoPE inverse
// frequencies (rope scaling).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "model/model_factory.h"

namespace pagoda::reference {

using Matrix = std::vector<double>;  // [n_out, n_in] row-major

inline Matrix load_matrix(const model::GgufFile& f, const std::string& name) {
  const model::GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  const int64_t n_in = t->dims[0];
  int64_t n_out = 1;  // every row of a matrix, or of all experts of a 3-D tensor
  for (size_t i = 1; i < t->dims.size(); ++i) n_out *= t->dims[i];
  const size_t row_bytes = dtype_row_bytes(*t->dtype, n_in);
  Matrix m(n_out * n_in);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    kernels::dequantize_row(*t->dtype, f.tensor_data(*t) + o * row_bytes, row.data(), n_in);
    for (int64_t i = 0; i < n_in; ++i) m[o * n_in + i] = row[i];
  }
  return m;
}

inline std::vector<double> matvec(const Matrix& w, const std::vector<double>& x, int64_t n_out) {
  const int64_t n_in = static_cast<int64_t>(x.size());
  std::vector<double> y(n_out, 0.0);
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t i = 0; i < n_in; ++i) y[o] += w[o * n_in + i] * x[i];
  }
  return y;
}

inline std::vector<double> rmsnorm(const std::vector<double>& x, const Matrix& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

// neox: rotate (i, i + hd/2) (qwen2); else adjacent pairs (2i, 2i+1) (llama). inv_freq:
// [hd / 2] inverse frequencies, or empty for base^(-2i / hd).
inline void rope(std::vector<double>& v, int64_t n_heads, int64_t hd, int64_t pos, double base, bool neox,
                 const std::vector<double>& inv_freq = {}) {
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = pos * (inv_freq.empty() ? std::pow(base, -2.0 * i / hd) : inv_freq[i]);
      double& a = v[h * hd + (neox ? i : 2 * i)];
      double& b = v[h * hd + (neox ? i + hd / 2 : 2 * i + 1)];
      const double x0 = a, x1 = b;
      a = x0 * std::cos(angle) - x1 * std::sin(angle);
      b = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
  }
}

// StreamingLLM in the reference: before a token is added to a full cache (sinks + window
// entries), the block_size entries after the sinks are dropped; positions are cache indices.
struct Streaming {
  int64_t sinks = 0, window = 0, block_size = 0;  // window 0: off
};

// Per-head RMSNorm (qwen3 q/k norms): v [n_heads * hd], w [hd].
inline void head_rmsnorm(std::vector<double>& v, const Matrix& w, int64_t hd, double eps) {
  for (size_t h = 0; h < v.size() / hd; ++h) {
    const std::vector<double> head(v.begin() + h * hd, v.begin() + (h + 1) * hd);
    const std::vector<double> normed = rmsnorm(head, w, eps);
    std::copy(normed.begin(), normed.end(), v.begin() + h * hd);
  }
}

// One layer's FFN weights: dense SwiGLU (wg, wu, wd), or a mixture of experts (router, bias,
// every expert's rows eg, eu, ed) with its shared experts in wg, wu, wd (empty if none).
struct FfnLayer {
  bool moe = false;
  Matrix wg, wu, wd;
  Matrix router, bias, eg, eu, ed;
};

inline FfnLayer load_ffn(const model::GgufFile& f, const model::ModelShape& s, int64_t l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  FfnLayer L;
  L.moe = s.n_expert > 0 && l >= s.n_dense_lead;
  const std::string suffix = L.moe ? "_shexp.weight" : ".weight";
  if (!L.moe || s.n_expert_shared > 0) {
    L.wg = load_matrix(f, p + "ffn_gate" + suffix);
    L.wu = load_matrix(f, p + "ffn_up" + suffix);
    L.wd = load_matrix(f, p + "ffn_down" + suffix);
  }
  if (L.moe) {
    L.router = load_matrix(f, p + "ffn_gate_inp.weight");
    if (s.expert_bias) L.bias = load_matrix(f, p + "exp_probs_b.bias");
    L.eg = load_matrix(f, p + "ffn_gate_exps.weight");
    L.eu = load_matrix(f, p + "ffn_up_exps.weight");
    L.ed = load_matrix(f, p + "ffn_down_exps.weight");
  }
  return L;
}

// silu(h Wg) * (h Wu) then Wd, with Wg, Wu of ff rows (rows `first`.. of a stacked tensor).
inline std::vector<double> swiglu(const Matrix& wg, const Matrix& wu, const Matrix& wd, int64_t first, int64_t ff,
                                  const std::vector<double>& h) {
  const int64_t d = static_cast<int64_t>(h.size());
  const Matrix g_e(wg.begin() + first * ff * d, wg.begin() + (first + 1) * ff * d);
  const Matrix u_e(wu.begin() + first * ff * d, wu.begin() + (first + 1) * ff * d);
  const Matrix d_e(wd.begin() + first * d * ff, wd.begin() + (first + 1) * d * ff);
  auto g = matvec(g_e, h, ff);
  auto u = matvec(u_e, h, ff);
  for (int64_t j = 0; j < ff; ++j) g[j] = g[j] / (1 + std::exp(-g[j])) * u[j];
  return matvec(d_e, g, d);
}

// The FFN's output for the normed input h. Mixture of experts, written out from DeepSeek's
// and Qwen's papers: probabilities by softmax or sigmoid; the bias shifts only the choice;
// with groups, a group's score is the sum of its two best and only the best groups' experts
// compete; the k best by biased score; weights = unbiased probabilities, renormalized if the
// rule says so, times the scale; plus the shared experts.
inline std::vector<double> reference_ffn(const FfnLayer& L, const model::ModelShape& s, const std::vector<double>& h) {
  const int64_t d = static_cast<int64_t>(h.size());
  if (!L.moe) return swiglu(L.wg, L.wu, L.wd, 0, s.n_ff, h);
  const int64_t E = s.n_expert, k = s.n_expert_used, G = s.routing.n_groups;
  const std::vector<double> logit = matvec(L.router, h, E);
  std::vector<double> p(E), sel(E);
  double mx = *std::max_element(logit.begin(), logit.end()), z = 0;
  for (int64_t e = 0; e < E; ++e) z += std::exp(logit[e] - mx);
  for (int64_t e = 0; e < E; ++e) {
    p[e] = s.routing.gating == model::ExpertGating::kSoftmax ? std::exp(logit[e] - mx) / z : 1 / (1 + std::exp(-logit[e]));
    sel[e] = p[e] + (L.bias.empty() ? 0.0 : static_cast<double>(static_cast<float>(L.bias[e])));
  }
  std::vector<int64_t> candidates;
  std::vector<int64_t> groups(G);
  for (int64_t g = 0; g < G; ++g) groups[g] = g;
  std::vector<double> score(G, 0.0);
  for (int64_t g = 0; g < G && G > 1; ++g) {
    std::vector<double> v(sel.begin() + g * (E / G), sel.begin() + (g + 1) * (E / G));
    std::sort(v.rbegin(), v.rend());
    score[g] = v[0] + v[1];
  }
  std::stable_sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  for (int64_t i = 0; i < (G > 1 ? s.routing.n_groups_used : 1); ++i) {
    for (int64_t e = groups[i] * (E / G); e < (groups[i] + 1) * (E / G); ++e) candidates.push_back(e);
  }
  std::sort(candidates.begin(), candidates.end());
  std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) { return sel[a] > sel[b]; });
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[candidates[i]];
  std::vector<double> y = L.wg.empty() ? std::vector<double>(d, 0.0)
                                       : swiglu(L.wg, L.wu, L.wd, 0, s.n_ff_exp * s.n_expert_shared, h);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t e = candidates[i];
    const double weight = p[e] / (s.routing.normalize ? std::max(sum, 6.103515625e-5) : 1.0) * s.routing.scale;
    const std::vector<double> out = swiglu(L.eg, L.eu, L.ed, e, s.n_ff_exp, h);
    for (int64_t j = 0; j < d; ++j) y[j] += weight * out[j];
  }
  return y;
}

// Logits [n_tokens, n_vocab] of a llama, qwen2 or qwen3 model, all in double. The cache keeps K
// before RoPE and rotates it at its cache index when attending (equal to the token position
// unless streaming drops entries); shape.sliding_window masks index distances >= the window.
// The head dim is {arch}.attention.key_length when present. inv_freq: RoPE inverse
// frequencies [hd / 2] (scaled rope), or empty for 10000^(-2i / hd). neox: NeoX pairs even
// for llama (a Hugging Face folder's weights).
inline std::vector<double> reference_logits(const model::GgufFile& f, const model::ModelShape& s,
                                            const std::vector<int32_t>& tokens, const Streaming& stream = {},
                                            const std::vector<double>& inv_freq = {}, bool force_neox = false) {
  const int64_t hd = f.get_int(s.arch + ".attention.key_length").value_or(s.n_embd / s.n_head);
  const int64_t q_dim = s.n_head * hd, kv_dim = s.n_kv_head * hd, group = s.n_head / s.n_kv_head;
  const Matrix emb = load_matrix(f, "token_embd.weight");
  const Matrix out_norm = load_matrix(f, "output_norm.weight");
  const Matrix out = load_matrix(f, "output.weight");
  struct Layer {
    Matrix an, fn, wq, wk, wv, wo;
    FfnLayer ffn;
    Matrix bq, bk, bv;  // qwen2 only
    Matrix qn, kn;      // qwen3 only
  };
  const bool qwen2 = s.arch == "qwen2", qwen3 = s.arch == "qwen3" || s.arch == "qwen3moe";
  const bool neox = qwen2 || qwen3 || force_neox;
  std::vector<Layer> layers;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    layers.push_back({load_matrix(f, p + "attn_norm.weight"), load_matrix(f, p + "ffn_norm.weight"),
                      load_matrix(f, p + "attn_q.weight"), load_matrix(f, p + "attn_k.weight"),
                      load_matrix(f, p + "attn_v.weight"), load_matrix(f, p + "attn_output.weight"),
                      load_ffn(f, s, l), {}, {}, {}, {}, {}});
    if (qwen2) {
      layers.back().bq = load_matrix(f, p + "attn_q.bias");
      layers.back().bk = load_matrix(f, p + "attn_k.bias");
      layers.back().bv = load_matrix(f, p + "attn_v.bias");
    }
    if (qwen3) {
      layers.back().qn = load_matrix(f, p + "attn_q_norm.weight");
      layers.back().kn = load_matrix(f, p + "attn_k_norm.weight");
    }
  }
  std::vector<std::vector<std::vector<double>>> k_cache(s.n_layer), v_cache(s.n_layer);  // [layer][index][kv_dim], K before RoPE
  std::vector<double> logits;
  for (size_t step = 0; step < tokens.size(); ++step) {
    if (stream.window > 0 && static_cast<int64_t>(k_cache[0].size()) == stream.sinks + stream.window) {
      for (int64_t l = 0; l < s.n_layer; ++l) {
        k_cache[l].erase(k_cache[l].begin() + stream.sinks, k_cache[l].begin() + stream.sinks + stream.block_size);
        v_cache[l].erase(v_cache[l].begin() + stream.sinks, v_cache[l].begin() + stream.sinks + stream.block_size);
      }
    }
    const size_t pos = k_cache[0].size();  // cache index = position
    const int32_t token = tokens[step];
    std::vector<double> x(emb.begin() + token * s.n_embd, emb.begin() + (token + 1) * s.n_embd);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const Layer& L = layers[l];
      auto h = rmsnorm(x, L.an, 1e-5);
      auto q = matvec(L.wq, h, q_dim);
      auto k = matvec(L.wk, h, kv_dim);
      auto v = matvec(L.wv, h, kv_dim);
      if (qwen2) {
        for (int64_t i = 0; i < q_dim; ++i) q[i] += L.bq[i];
        for (int64_t i = 0; i < kv_dim; ++i) k[i] += L.bk[i], v[i] += L.bv[i];
      }
      if (qwen3) {
        head_rmsnorm(q, L.qn, hd, 1e-5);
        head_rmsnorm(k, L.kn, hd, 1e-5);
      }
      rope(q, s.n_head, hd, pos, 10000.0, neox, inv_freq);
      k_cache[l].push_back(k);
      v_cache[l].push_back(v);
      std::vector<double> att(q_dim, 0.0);
      for (int64_t head = 0; head < s.n_head; ++head) {
        const int64_t kvh = head / group;
        std::vector<double> w(pos + 1, 0.0);
        double mx = -1e300, sum = 0;
        // Sliding window: position pos sees t with pos - t < window (masked out otherwise).
        auto seen = [&](size_t t) { return s.sliding_window == 0 || pos - t < static_cast<size_t>(s.sliding_window); };
        for (size_t t = 0; t <= pos; ++t) {
          if (!seen(t)) continue;
          std::vector<double> kt = k_cache[l][t];
          rope(kt, s.n_kv_head, hd, static_cast<int64_t>(t), 10000.0, neox, inv_freq);
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[head * hd + i] * kt[kvh * hd + i];
          w[t] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[t]);
        }
        for (size_t t = 0; t <= pos; ++t) sum += seen(t) ? (w[t] = std::exp(w[t] - mx)) : 0.0;
        for (size_t t = 0; t <= pos; ++t) {
          if (!seen(t)) continue;
          for (int64_t i = 0; i < hd; ++i) att[head * hd + i] += w[t] / sum * v_cache[l][t][kvh * hd + i];
        }
      }
      auto o = matvec(L.wo, att, s.n_embd);
      for (int64_t i = 0; i < s.n_embd; ++i) x[i] += o[i];
      h = rmsnorm(x, L.fn, 1e-5);
      const std::vector<double> d = reference_ffn(L.ffn, s, h);
      for (int64_t i = 0; i < s.n_embd; ++i) x[i] += d[i];
    }
    auto y = matvec(out, rmsnorm(x, out_norm, 1e-5), s.n_vocab);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

// Worst |engine - reference| relative to the largest |reference| logit of the same row.
inline double max_relative_error(const std::vector<float>& got, const std::vector<double>& want, int64_t n_vocab) {
  double worst = 0;
  for (size_t r = 0; r < want.size() / n_vocab; ++r) {
    double scale = 1e-6, err = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      scale = std::max(scale, std::fabs(want[r * n_vocab + i]));
      err = std::max(err, std::fabs(got[r * n_vocab + i] - want[r * n_vocab + i]));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

}  // namespace pagoda::reference
