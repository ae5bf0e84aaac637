#include "model/arch/gemma3.h"

#include <cmath>

#include "model/arch/registry.h"
#include "model/model_factory.h"
#include "model/text/gguf_vocab.h"

namespace pagoda::model::arch {

Status finish_gemma3_config(ModelConfig& c, int64_t window, const std::vector<bool>& sliding, double base_swa,
                            double softcap) {
  c.sliding_window = 0;  // the window of the sliding layers only (layer_window)
  c.rope_local = c.rope;
  c.layer_window.clear();
  if (window > 0) {
    if (!sliding.empty() && static_cast<int64_t>(sliding.size()) != c.n_layer) {
      return Status::error("the sliding-layer pattern has " + std::to_string(sliding.size()) + " entries for " +
                           std::to_string(c.n_layer) + " layers");
    }
    c.layer_window.assign(static_cast<size_t>(c.n_layer), 0);
    for (int64_t l = 0; l < c.n_layer; ++l) c.layer_window[l] = sliding.empty() || sliding[l] ? window : 0;
    if (!(base_swa > 0) || !std::isfinite(base_swa)) return Status::error("bad local RoPE base (rope.freq_base_swa)");
    c.rope_local.freq_base = static_cast<float>(base_swa);
    c.rope_local.freq_scale = 1.0f;   // llama.cpp: rope_freq_scale_train_swa
    c.rope_local.freq_factors.clear();
  }
  if (softcap < 0 || !std::isfinite(softcap)) return Status::error("bad final_logit_softcapping");
  c.final_logit_softcap = static_cast<float>(softcap);
  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.post_norms = true;
  c.geglu = true;
  const int64_t scale_width = gemma3_attn_scale_width(c);  // gemma3.h
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(scale_width));
  return Status::ok();
}

Status read_gemma3_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) {
  // config_from_gguf read attention.sliding_window as a window of every layer: here it becomes
  // the window of the sliding layers only, and the cache keeps every layer's blocks.
  const int64_t window = c.sliding_window;
  std::vector<bool> sliding;
  if (window > 0) {
    PAGODA_ASSIGN_OR_RETURN(sliding, gguf_sliding_layers(f, "gemma3", c.n_layer));
  }
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-6));
  return finish_gemma3_config(c, window, sliding, f.get_float(p + "rope.freq_base_swa").value_or(10000.0),
                              f.get_float(p + "final_logit_softcapping").value_or(0.0))
      .with_context("gemma3");
}

Result<GgufFile> make_random_gemma3_model(const ModelShape& s, const WeightMix& mix, uint64_t seed,
                                          const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t hd = s.head_dim > 0 ? s.head_dim : (s.n_head > 0 ? s.n_embd / s.n_head : 0);
  if (s.n_head <= 0 || s.n_kv_head <= 0 || s.n_head % s.n_kv_head != 0 || hd <= 0 || hd % 2 != 0 ||
      s.sliding_pattern < 0 || s.sliding_window < 0) {
    return Status::error("bad gemma3 shape " + s.name);
  }
  const int64_t q_dim = s.n_head * hd, kv_dim = s.n_kv_head * hd;
  for (int64_t n_in : {s.n_embd, s.n_ff, q_dim}) {
    if (n_in % dtype_info(weight_dtype(mix, "blk.0.ffn_up.weight", n_in, s.n_layer)).block_elems != 0) {
      return Status::error("shape " + s.name + " does not fit " + mix.name + " blocks");
    }
  }
  auto u32 = [](int64_t v) { return GgufValue::of_u32(static_cast<uint32_t>(v)); };
  const std::string a = "gemma3.";
  GgufFile f = random_model_header("gemma3", s, mix);
  f.set(a + "attention.head_count", u32(s.n_head));
  f.set(a + "attention.head_count_kv", u32(s.n_kv_head));
  f.set(a + "attention.key_length", u32(hd));
  f.set(a + "attention.value_length", u32(hd));
  f.set(a + "rope.dimension_count", u32(hd));
  f.set(a + "rope.freq_base", GgufValue::of_f32(1000000.0f));
  f.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-6f));
  if (s.sliding_window > 0) {
    f.set(a + "attention.sliding_window", u32(s.sliding_window));
    if (s.sliding_pattern > 0) f.set(a + "attention.sliding_window_pattern", u32(s.sliding_pattern));
  }
  if (s.logit_softcap > 0) f.set(a + "final_logit_softcapping", GgufValue::of_f32(s.logit_softcap));
  f.set(a + "vocab_size", u32(s.n_vocab));
  vocab_to_gguf(make_synthetic_vocab(s.n_vocab), f);

  Rng rng(seed);
  auto add_weight = [&](const std::string& name, int64_t n_out, int64_t n_in) {
    return add_random_matrix(f, name, n_out, n_in, weight_dtype(mix, name, n_in, s.n_layer), rng);
  };
  auto add_norm = [&](const std::string& name, int64_t n) { return add_random_f32(f, name, n, 0.5f, 1.5f, rng); };
  auto report = [&](int64_t done) {
    if (progress) progress(done, s.n_layer + 2);
  };
  // Tied classifier: the embedding is also the output, so its dtype follows output.weight's rule.
  PAGODA_RETURN_IF_ERROR(add_random_matrix(f, "token_embd.weight", s.n_vocab, s.n_embd,
                                           weight_dtype(mix, "output.weight", s.n_embd, s.n_layer), rng));
  report(1);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    PAGODA_RETURN_IF_ERROR(add_norm(p + "attn_norm.weight", s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_q.weight", q_dim, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_k.weight", kv_dim, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_v.weight", kv_dim, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_norm(p + "attn_q_norm.weight", hd));
    PAGODA_RETURN_IF_ERROR(add_norm(p + "attn_k_norm.weight", hd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_output.weight", s.n_embd, q_dim));
    PAGODA_RETURN_IF_ERROR(add_norm(p + "post_attention_norm.weight", s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_norm(p + "ffn_norm.weight", s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_gate.weight", s.n_ff, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_up.weight", s.n_ff, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_down.weight", s.n_embd, s.n_ff));
    PAGODA_RETURN_IF_ERROR(add_norm(p + "post_ffw_norm.weight", s.n_embd));
    report(l + 2);
  }
  PAGODA_RETURN_IF_ERROR(add_random_f32(f, "output_norm.weight", s.n_embd, 0.5f * s.output_norm_scale,
                                       1.5f * s.output_norm_scale, rng));
  if (s.untied_output) PAGODA_RETURN_IF_ERROR(add_weight("output.weight", s.n_vocab, s.n_embd));
  report(s.n_layer + 2);
  return f;
}

}  // namespace pagoda::model::arch
