// deepseek2 (DeepSeek-V2 / V2-Lite / V3 attention, dense FFN): weights binding and the forward
// pass with Multi-head Latent Attention over a latent paged cache.
//
//   per layer: h = rmsnorm(x)
//     q      = h Wq  or  rmsnorm(h Wq_a) Wq_b (q LoRA)         [T, n_head, dn + dr]
//     kv_a   = h Wkv_a                                        [T, r + dr]
//     c_kv   = rmsnorm(kv_a[:, :r]);  k_pe = rope(kv_a[:, r:])  (decoupled RoPE, one shared head)
//     cache  <- [c_kv | k_pe]                                 one latent row per token
//     q_abs  = [q_nope W_UK^T | rope(q_pe)]   per head          [T, n_head, r + dr]
//     o_lat  = mla_attention(q_abs, cache)                    [T, n_head, r]
//     x     += (o_lat W_UV per head) Wo;  x += SwiGLU FFN
// which equals attention over the decompressed keys [c_kv W_UK | k_pe] and values c_kv W_UV
// (tests/engine/mla_forward_test.cpp checks it against a float64 decompressed reference).
// Long prefill chunks attend in that expanded form instead (kernels::mla_attention_expanded:
// the chunk's keys and values decompressed per head, no q_abs, no up-projection), where it
// costs fewer multiply-adds (ForwardPass::set_mla_prefill).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/llama_model.h"
#include "model/moe.h"
#include "model/weight_binding.h"

namespace pagoda::model {

namespace {

// A tensor of any shape as f32, rows of dims[0] values.
Result<std::vector<float>> load_f32(const TensorTable& f, const std::string& name, std::vector<int64_t> dims) {
  PAGODA_ASSIGN_OR_RETURN(const TensorRef* t, find_tensor(f, name, dims));
  const int64_t row = dims[0];
  if (row % dtype_info(*t->dtype).block_elems != 0) {
    return Status::error("tensor '" + name + "': rows of " + std::to_string(row) + " are not whole " +
                         std::string(dtype_name(*t->dtype)) + " blocks");
  }
  int64_t n_rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) n_rows *= dims[i];
  std::vector<float> out(row * n_rows);
  const size_t row_bytes = dtype_row_bytes(*t->dtype, row);
  for (int64_t i = 0; i < n_rows; ++i) kernels::dequantize_row(*t->dtype, t->data + i * row_bytes, out.data() + i * row, row);
  return out;
}

kernels::WeightView f32_matrix(const float* data, int64_t n_out, int64_t n_in) {
  kernels::WeightView w;
  w.data = data;
  w.dtype = DType::kF32;
  w.n_out = n_out;
  w.n_in = n_in;
  return w;
}

}  // namespace

Status LlamaModel::bind_mla(const TensorTable& f) {
  const ModelConfig& c = config_;
  const int64_t H = c.n_head, r = c.kv_lora_rank, dr = c.qk_rope_dim, dn = c.qk_nope_dim, dv = c.v_head_dim;
  PAGODA_ASSIGN_OR_RETURN(token_embd_, bind_matrix(f, "token_embd.weight", c.n_vocab, c.n_embd));
  if (f.contains("output.weight")) {
    PAGODA_ASSIGN_OR_RETURN(output_, bind_matrix(f, "output.weight", c.n_vocab, c.n_embd));
  } else {
    output_ = token_embd_;
  }
  PAGODA_ASSIGN_OR_RETURN(output_norm_, load_vector(f, "output_norm.weight", c.n_embd));
  layers_.resize(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = layers_[l];
    PAGODA_ASSIGN_OR_RETURN(w.attn_norm, load_vector(f, p + "attn_norm.weight", c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.ffn_norm, load_vector(f, p + "ffn_norm.weight", c.n_embd));
    if (c.q_lora_rank > 0) {
      PAGODA_ASSIGN_OR_RETURN(w.wq_a, bind_matrix(f, p + "attn_q_a.weight", c.q_lora_rank, c.n_embd));
      PAGODA_ASSIGN_OR_RETURN(w.q_a_norm, load_vector(f, p + "attn_q_a_norm.weight", c.q_lora_rank));
      PAGODA_ASSIGN_OR_RETURN(w.wq, bind_matrix(f, p + "attn_q_b.weight", c.q_dim(), c.q_lora_rank));
    } else {
      PAGODA_ASSIGN_OR_RETURN(w.wq, bind_matrix(f, p + "attn_q.weight", c.q_dim(), c.n_embd));
    }
    PAGODA_ASSIGN_OR_RETURN(w.wkv_a, bind_matrix(f, p + "attn_kv_a_mqa.weight", r + dr, c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.kv_a_norm, load_vector(f, p + "attn_kv_a_norm.weight", r));
    if (f.contains(p + "attn_kv_b.weight")) {
      // Rows of head h: [dn rows of W_UK (k_nope), dv rows of W_UV (value)], each of r values.
      PAGODA_ASSIGN_OR_RETURN(std::vector<float> kv_b, load_f32(f, p + "attn_kv_b.weight", {r, H * (dn + dv)}));
      w.wk_b.resize(H * r * dn);
      w.wv_b.resize(H * dv * r);
      for (int64_t h = 0; h < H; ++h) {
        const float* rows = kv_b.data() + h * (dn + dv) * r;
        for (int64_t i = 0; i < dn; ++i) {
          for (int64_t j = 0; j < r; ++j) w.wk_b[(h * r + j) * dn + i] = rows[i * r + j];  // transposed
        }
        std::memcpy(w.wv_b.data() + h * dv * r, rows + dn * r, dv * r * sizeof(float));
      }
    } else {  // llama.cpp's MLA conversion: split and already in absorbed order
      PAGODA_ASSIGN_OR_RETURN(w.wk_b, load_f32(f, p + "attn_k_b.weight", {dn, r, H}));
      PAGODA_ASSIGN_OR_RETURN(w.wv_b, load_f32(f, p + "attn_v_b.weight", {r, dv, H}));
    }
    PAGODA_ASSIGN_OR_RETURN(w.wo, bind_matrix(f, p + "attn_output.weight", c.n_embd, H * dv));
    PAGODA_RETURN_IF_ERROR(bind_ffn(f, c, l, w));
  }
  return Status::ok();
}

// Which sequences of the batch prefill in the expanded form (window 0 and 16+ rows: the GEMM
// paths; then mla_prefill_, or in kAuto the one with fewer multiply-adds), and the rows of the
// others, which need absorbed queries.
int64_t ForwardPass::plan_mla_forms(const Batch& batch) {
  const ModelConfig& c = model_.config();
  const kernels::MlaUpProjection dims{nullptr, nullptr, c.kv_lora_rank, c.qk_nope_dim, c.v_head_dim};
  int64_t n_absorbed = 0;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const kernels::SeqSpan& s = batch.seqs[i];
    const int32_t* pos = batch.positions.data() + s.token_begin;
    const bool gemm = window_ == 0 && s.n_tokens >= kernels::kMlaGemmMinRows && mla_prefill_ != MlaPrefill::kRowWalk;
    const bool expanded = gemm && (mla_prefill_ == MlaPrefill::kExpanded ||
                                   (mla_prefill_ == MlaPrefill::kAuto &&
                                    kernels::mla_expanded_pays(pos, s.n_tokens, c.kv_cache_head_dim(), dims)));
    mla_expanded_[i] = expanded ? 1 : 0;
    if (expanded) continue;
    for (int64_t t = s.token_begin; t < s.token_begin + s.n_tokens; ++t) absorbed_rows_[n_absorbed++] = t;
  }
  return n_absorbed;
}

// Attention of the absorbed-form sequences over the latent cache: those with 16 rows or more
// (a prefill chunk) as tiled GEMMs, fewer rows over kMlaHeadsMinContext positions or more as
// GEMMs over their heads, the others by the row walk: each run of consecutive row-walk
// sequences (contiguous rows) in one call, rebased to its first row, so a decode batch of
// short sequences is one parallel call as before.
void ForwardPass::mla_attend(const kernels::KvLayerView& layer, std::span<const kernels::SeqSpan> seqs,
                             const kernels::AttentionParams& attn, const int32_t* positions) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.n_head, r = c.kv_lora_rank, L = c.kv_cache_head_dim();
  int64_t run = 0, base = 0;  // the pending row-walk run: mla_seq_[0, run), rows from `base`
  auto flush = [&] {
    if (run == 0) return;
    kernels::mla_attention(layer, q_abs_.data() + base * H * L, positions + base, mla_seq_.data(), run, attn, r,
                           att_latent_.data() + base * H * r, pool_, attention_scratch_, isa_);
    run = 0;
  };
  for (size_t i = 0; i < seqs.size(); ++i) {
    const kernels::SeqSpan& s = seqs[i];
    const bool gemm = attn.window == 0 && mla_prefill_ != MlaPrefill::kRowWalk;
    const bool walk = mla_expanded_[i] == 0 && !(gemm && s.n_tokens >= kernels::kMlaGemmMinRows) &&
                      !(gemm && positions[s.token_begin] + 1 >= kernels::kMlaHeadsMinContext);
    if (!walk) {
      flush();
    } else {
      if (run == 0) base = s.token_begin;
      mla_seq_[static_cast<size_t>(run)] = s;
      mla_seq_[static_cast<size_t>(run++)].token_begin = s.token_begin - base;
      continue;
    }
    if (mla_expanded_[i] != 0) continue;
    if (s.n_tokens >= kernels::kMlaGemmMinRows) {
      kernels::mla_attention_gemm(layer, q_abs_.data(), positions, s, attn, r, att_latent_.data(), *mla_gemm_, pool_, isa_);
    } else {  // decode over a long context
      kernels::mla_attention_heads_gemm(layer, q_abs_.data(), positions, s, attn, r, att_latent_.data(), *mla_gemm_,
                                        pool_, isa_);
    }
  }
  flush();
}

void ForwardPass::forward_mla(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits) {
  const ModelConfig& c = model_.config();
  const int64_t T = batch.n_tokens();
  const int64_t d = c.n_embd, H = c.n_head, r = c.kv_lora_rank, dr = c.qk_rope_dim, dn = c.qk_nope_dim;
  const int64_t dv = c.v_head_dim, L = r + dr, qh = dn + dr;
  CHECK(T > 0 && T <= max_tokens_) << "batch of " << T << " tokens, max " << max_tokens_;
  CHECK_EQ(static_cast<int64_t>(batch.positions.size()), T);
  CHECK_EQ(static_cast<int64_t>(batch.slot_mapping.size()), T);
  CHECK_EQ(static_cast<int64_t>(kv_layers.size()), c.n_layer);
  CHECK(batch.rope_positions.empty() && batch.scores == nullptr) << "MLA attention has no KV selection";
  float* x = x_.data();
  float* xb = xb_.data();
  float* q = q_.data();         // [T, H, qh]
  float* kv_a = kv_a_.data();   // [T, L]
  float* q_abs = q_abs_.data(); // [T, H, L]
  float* att = att_.data();     // [T, H * dv]
  embed(batch);
  const int64_t n_abs = plan_mla_forms(batch);  // rows needing absorbed queries
  const int64_t* rows = absorbed_rows_.data();  // [n_abs]
  const kernels::AttentionParams attn{H, c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(qh)),
                                      window_, n_sinks_};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = model_.layer(l);
    kernels::rmsnorm(x, w.attn_norm.data(), xb, T, d, c.rms_eps);
    if (c.q_lora_rank > 0) {
      matmul_.run(w.wq_a, xb, T, q_a_.data());
      kernels::rmsnorm(q_a_.data(), w.q_a_norm.data(), q_a_.data(), T, c.q_lora_rank, c.rms_eps);
      matmul_.run(w.wq, q_a_.data(), T, q);
    } else {
      matmul_.run(w.wq, xb, T, q);
    }
    matmul_.run(w.wkv_a, xb, T, kv_a);
    for (int64_t t = 0; t < T; ++t) kernels::rmsnorm(kv_a + t * L, w.kv_a_norm.data(), kv_a + t * L, 1, r, c.rms_eps);
    // Decoupled RoPE: the last dr values of each query head and of the latent row.
    kernels::rope(q + dn, batch.positions.data(), T, H, c.rope);
    kernels::rope(kv_a + r, batch.positions.data(), T, 1, latent_rope_);
    kernels::store_kv(kv_layers[l], kv_a, nullptr, batch.slots_of(l).data(), T, isa_);
    // Absorb W_UK into the queries of the absorbed rows, head by head:
    // q_abs[t, h] = [W_UK[h]^T q_nope[t, h] | q_pe[t, h]].
    for (int64_t h = 0; h < H && n_abs > 0; ++h) {
      for (int64_t i = 0; i < n_abs; ++i) {
        std::memcpy(head_in_.data() + i * dn, q + (rows[i] * H + h) * qh, dn * sizeof(float));
      }
      matmul_.run(f32_matrix(w.wk_b.data() + h * r * dn, r, dn), head_in_.data(), n_abs, head_out_.data());
      for (int64_t i = 0; i < n_abs; ++i) {
        float* dst = q_abs + (rows[i] * H + h) * L;
        std::memcpy(dst, head_out_.data() + i * r, r * sizeof(float));
        std::memcpy(dst + r, q + (rows[i] * H + h) * qh + dn, dr * sizeof(float));
      }
    }
    const std::span<const kernels::SeqSpan> seqs = batch.seqs_of(l);
    mla_attend(kv_layers[l], seqs, attn, batch.positions.data());
    // Up-project each absorbed row's latent output to its value space: o[t, h] = W_UV[h] o_lat[t, h].
    for (int64_t h = 0; h < H && n_abs > 0; ++h) {
      for (int64_t i = 0; i < n_abs; ++i) {
        std::memcpy(head_in_.data() + i * r, att_latent_.data() + (rows[i] * H + h) * r, r * sizeof(float));
      }
      matmul_.run(f32_matrix(w.wv_b.data() + h * dv * r, dv, r), head_in_.data(), n_abs, head_out_.data());
      for (int64_t i = 0; i < n_abs; ++i) {
        std::memcpy(att + rows[i] * H * dv + h * dv, head_out_.data() + i * dv, dv * sizeof(float));
      }
    }
    // The expanded-form sequences attend with q itself, straight into att's value space.
    const kernels::MlaUpProjection up{w.wk_b.data(), w.wv_b.data(), r, dn, dv};
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (mla_expanded_[i] == 0) continue;
      kernels::mla_attention_expanded(kv_layers[l], q, batch.positions.data(), seqs[i], attn, up, att, *mla_gemm_,
                                      pool_, isa_);
    }
    matmul_.run(w.wo, att, T, xb);
    kernels::add_inplace(x, xb, T * d);
    feed_forward(w, l, T);
  }
  classify(batch, logits);
}

}  // namespace pagoda::model
