// A float64 forward pass of gemma3 files (model/arch/gemma3.h's arithmetic) with plain loops and
// a contiguous cache, written from the family's description, not from the engine's code: the
// reference of gemma3_forward_test. Reads every hyperparameter from the GGUF metadata itself.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "reference_forward.h"

namespace pagoda::reference {

struct Gemma3Layer {
  Matrix an, wq, wk, wv, qn, kn, wo, pan, fn, wg, wu, wd, pfn;
};

// Logits [n_tokens, n_vocab] in double.
inline std::vector<double> gemma3_reference_logits(const model::GgufFile& f, const std::vector<int32_t>& tokens) {
  auto geti = [&](const std::string& k) { return f.get_int("gemma3." + k).value(); };
  const int64_t d = geti("embedding_length"), n_layer = geti("block_count"), H = geti("attention.head_count");
  const int64_t Hkv = geti("attention.head_count_kv"), hd = geti("attention.key_length"), ff = geti("feed_forward_length");
  const int64_t window = f.get_int("gemma3.attention.sliding_window").value_or(0);
  const int64_t pattern = f.get_int("gemma3.attention.sliding_window_pattern").value_or(6);
  const double eps = f.get_float("gemma3.attention.layer_norm_rms_epsilon").value_or(1e-6);
  const double base_global = f.get_float("gemma3.rope.freq_base").value_or(10000.0);
  const double base_local = f.get_float("gemma3.rope.freq_base_swa").value_or(10000.0);
  const double cap = f.get_float("gemma3.final_logit_softcapping").value_or(0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n_layer == 62 ? d / H : hd));
  const Matrix emb = load_matrix(f, "token_embd.weight");
  const int64_t V = static_cast<int64_t>(emb.size()) / d;
  const Matrix out_norm = load_matrix(f, "output_norm.weight");
  const Matrix out = f.find_tensor("output.weight") != nullptr ? load_matrix(f, "output.weight") : emb;
  std::vector<Gemma3Layer> layers;
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto m = [&](const char* n) { return load_matrix(f, p + n + ".weight"); };
    layers.push_back({m("attn_norm"), m("attn_q"), m("attn_k"), m("attn_v"), m("attn_q_norm"), m("attn_k_norm"),
                      m("attn_output"), m("post_attention_norm"), m("ffn_norm"), m("ffn_gate"), m("ffn_up"),
                      m("ffn_down"), m("post_ffw_norm")});
  }
  // Layer l slides (llama.cpp's set_swa_pattern) when the file has a window.
  auto sliding = [&](int64_t l) { return window > 0 && (l + 1) % pattern != 0; };
  std::vector<std::vector<std::vector<double>>> k_cache(n_layer), v_cache(n_layer);  // [layer][pos][Hkv * hd], after RoPE
  std::vector<double> logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<double> x(emb.begin() + tokens[pos] * d, emb.begin() + (tokens[pos] + 1) * d);
    for (double& v : x) v *= std::sqrt(static_cast<double>(d));
    for (int64_t l = 0; l < n_layer; ++l) {
      const Gemma3Layer& L = layers[l];
      const double base = sliding(l) ? base_local : base_global;
      auto h = rmsnorm(x, L.an, eps);
      auto q = matvec(L.wq, h, H * hd);
      auto k = matvec(L.wk, h, Hkv * hd);
      auto v = matvec(L.wv, h, Hkv * hd);
      head_rmsnorm(q, L.qn, hd, eps);
      head_rmsnorm(k, L.kn, hd, eps);
      rope(q, H, hd, static_cast<int64_t>(pos), base, /*neox=*/true);
      rope(k, Hkv, hd, static_cast<int64_t>(pos), base, /*neox=*/true);
      k_cache[l].push_back(k);
      v_cache[l].push_back(v);
      std::vector<double> att(H * hd, 0.0);
      for (int64_t head = 0; head < H; ++head) {
        const int64_t kvh = head / (H / Hkv);
        auto seen = [&](size_t t) { return !sliding(l) || pos - t < static_cast<size_t>(window); };
        std::vector<double> w(pos + 1, 0.0);
        double mx = -1e300, sum = 0;
        for (size_t t = 0; t <= pos; ++t) {
          if (!seen(t)) continue;
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i) dot += q[head * hd + i] * k_cache[l][t][kvh * hd + i];
          w[t] = dot * scale;
          mx = std::max(mx, w[t]);
        }
        for (size_t t = 0; t <= pos; ++t) sum += seen(t) ? (w[t] = std::exp(w[t] - mx)) : 0.0;
        for (size_t t = 0; t <= pos; ++t) {
          if (!seen(t)) continue;
          for (int64_t i = 0; i < hd; ++i) att[head * hd + i] += w[t] / sum * v_cache[l][t][kvh * hd + i];
        }
      }
      auto o = rmsnorm(matvec(L.wo, att, d), L.pan, eps);
      for (int64_t i = 0; i < d; ++i) x[i] += o[i];
      h = rmsnorm(x, L.fn, eps);
      auto g = matvec(L.wg, h, ff);
      auto u = matvec(L.wu, h, ff);
      for (int64_t i = 0; i < ff; ++i) {
        const double z = g[i];
        g[i] = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z))) * u[i];
      }
      auto y = rmsnorm(matvec(L.wd, g, d), L.pfn, eps);
      for (int64_t i = 0; i < d; ++i) x[i] += y[i];
    }
    auto z = matvec(out, rmsnorm(x, out_norm, eps), V);
    if (cap > 0) {
      for (double& v : z) v = cap * std::tanh(v / cap);
    }
    logits.insert(logits.end(), z.begin(), z.end());
  }
  return logits;
}

}  // namespace pagoda::reference
