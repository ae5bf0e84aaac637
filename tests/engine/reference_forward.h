// A float64 forward pass of llama/qwen2/qwen3/qwen3moe models with plain loops and a contiguous KV cache
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
    Matrix an, fn, wq, wk, wv, wo, wg, wu, wd;
    Matrix bq, bk, bv;  // qwen2 only
    Matrix qn, kn;      // qwen3 only
    Matrix router, eg, eu, ed;  // qwen3moe: [n_expert, n_embd] and every expert's rows
  };
  const bool moe = s.n_expert > 0;
  const bool qwen2 = s.arch == "qwen2", qwen3 = s.arch == "qwen3" || s.arch == "qwen3moe";
  const bool neox = qwen2 || qwen3 || force_neox;
  std::vector<Layer> layers;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    layers.push_back({load_matrix(f, p + "attn_norm.weight"), load_matrix(f, p + "ffn_norm.weight"),
                      load_matrix(f, p + "attn_q.weight"), load_matrix(f, p + "attn_k.weight"),
                      load_matrix(f, p + "attn_v.weight"), load_matrix(f, p + "attn_output.weight"),
                      moe ? Matrix{} : load_matrix(f, p + "ffn_gate.weight"),
                      moe ? Matrix{} : load_matrix(f, p + "ffn_up.weight"),
                      moe ? Matrix{} : load_matrix(f, p + "ffn_down.weight"), {}, {}, {}, {}, {}, {}, {}, {}, {}});
    if (moe) {
      layers.back().router = load_matrix(f, p + "ffn_gate_inp.weight");
      layers.back().eg = load_matrix(f, p + "ffn_gate_exps.weight");
      layers.back().eu = load_matrix(f, p + "ffn_up_exps.weight");
      layers.back().ed = load_matrix(f, p + "ffn_down_exps.weight");
    }
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
      if (moe) {  // softmax over the router's logits, the k most probable experts, renormalized
        const int64_t E = s.n_expert, ff = s.n_ff_exp;
        const std::vector<double> r = matvec(L.router, h, E);
        std::vector<int64_t> order(E);
        for (int64_t e = 0; e < E; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r[a] > r[b]; });
        double z = 0;
        for (int64_t i = 0; i < s.n_expert_used; ++i) z += std::exp(r[order[i]] - r[order[0]]);
        for (int64_t i = 0; i < s.n_expert_used; ++i) {
          const int64_t e = order[i];
          const double weight = std::exp(r[e] - r[order[0]]) / z;
          const Matrix g_e(L.eg.begin() + e * ff * s.n_embd, L.eg.begin() + (e + 1) * ff * s.n_embd);
          const Matrix u_e(L.eu.begin() + e * ff * s.n_embd, L.eu.begin() + (e + 1) * ff * s.n_embd);
          const Matrix d_e(L.ed.begin() + e * s.n_embd * ff, L.ed.begin() + (e + 1) * s.n_embd * ff);
          auto g = matvec(g_e, h, ff);
          auto u = matvec(u_e, h, ff);
          for (int64_t j = 0; j < ff; ++j) g[j] = g[j] / (1 + std::exp(-g[j])) * u[j];
          auto d = matvec(d_e, g, s.n_embd);
          for (int64_t j = 0; j < s.n_embd; ++j) x[j] += weight * d[j];
        }
        continue;
      }
      auto g = matvec(L.wg, h, s.n_ff);
      auto u = matvec(L.wu, h, s.n_ff);
      for (int64_t i = 0; i < s.n_ff; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      auto d = matvec(L.wd, g, s.n_embd);
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
