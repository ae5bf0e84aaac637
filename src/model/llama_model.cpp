#include "model/llama_model.h"

#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/weight_binding.h"

namespace pagoda::model {

namespace {

// Every tensor of a GGUF file under its own name.
TensorTable tensor_table_from_gguf(const GgufFile& file) {
  TensorTable table;
  for (const GgufTensorInfo& t : file.tensors()) {
    table[t.name] = TensorRef{t.dims, t.dtype, ggml_type_name(t.ggml_type), file.tensor_data(t)};
  }
  return table;
}

}  // namespace

Result<const TensorRef*> find_tensor(const TensorTable& tensors, const std::string& name, std::vector<int64_t> dims) {
  auto it = tensors.find(name);
  if (it == tensors.end()) return Status::error("missing tensor '" + name + "'");
  const TensorRef* t = &it->second;
  if (t->dims != dims) {
    std::string want, got;
    for (auto d : dims) want += (want.empty() ? "" : " x ") + std::to_string(d);
    for (auto d : t->dims) got += (got.empty() ? "" : " x ") + std::to_string(d);
    return Status::error("tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
  }
  if (!t->dtype.has_value()) {
    return Status::error("tensor '" + name + "' has type " + t->type_name +
                         ", which Pagoda cannot compute with (supported: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)");
  }
  return t;
}

Result<kernels::WeightView> bind_matrix(const TensorTable& tensors, const std::string& name, int64_t n_out, int64_t n_in) {
  PAGODA_ASSIGN_OR_RETURN(const TensorRef* t, find_tensor(tensors, name, {n_in, n_out}));
  if (n_in % dtype_info(*t->dtype).block_elems != 0) {
    return Status::error("tensor '" + name + "': row of " + std::to_string(n_in) + " is not a whole number of " +
                         std::string(dtype_name(*t->dtype)) + " blocks");
  }
  kernels::WeightView w;
  w.data = t->data;
  w.dtype = *t->dtype;
  w.n_out = n_out;
  w.n_in = n_in;
  return w;
}

Result<std::vector<float>> load_vector(const TensorTable& tensors, const std::string& name, int64_t n) {
  PAGODA_ASSIGN_OR_RETURN(const TensorRef* t, find_tensor(tensors, name, {n}));
  if (dtype_info(*t->dtype).block_elems != 1) {
    return Status::error("tensor '" + name + "' must be f32, f16 or bf16");
  }
  std::vector<float> out(n);
  kernels::dequantize_row(*t->dtype, t->data, out.data(), n);
  return out;
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(GgufFile file) {
  PAGODA_ASSIGN_OR_RETURN(ModelConfig config, config_from_gguf(file));
  std::unique_ptr<LlamaModel> model(new LlamaModel(std::move(file), std::move(config)));
  PAGODA_RETURN_IF_ERROR(model->bind(tensor_table_from_gguf(model->file_)));
  return model;
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(HfCheckpoint checkpoint) {
  ModelConfig config = checkpoint.config().model;
  std::unique_ptr<LlamaModel> model(new LlamaModel(checkpoint.metadata(), std::move(config)));
  model->checkpoint_ = std::make_unique<HfCheckpoint>(std::move(checkpoint));
  Status bound = model->bind(model->checkpoint_->tensors());
  if (!bound.is_ok()) return bound.with_context(model->checkpoint_->dir());
  return model;
}

Status LlamaModel::bind(const TensorTable& f) {
  const ModelConfig& c = config_;
  if (c.is_mla()) return bind_mla(f);
  PAGODA_ASSIGN_OR_RETURN(token_embd_, bind_matrix(f, "token_embd.weight", c.n_vocab, c.n_embd));
  if (f.contains("output.weight")) {
    PAGODA_ASSIGN_OR_RETURN(output_, bind_matrix(f, "output.weight", c.n_vocab, c.n_embd));
  } else {
    output_ = token_embd_;  // tied classifier
  }
  PAGODA_ASSIGN_OR_RETURN(output_norm_, load_vector(f, "output_norm.weight", c.n_embd));
  layers_.resize(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = layers_[l];
    PAGODA_ASSIGN_OR_RETURN(w.attn_norm, load_vector(f, p + "attn_norm.weight", c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.ffn_norm, load_vector(f, p + "ffn_norm.weight", c.n_embd));
    PAGODA_ASSIGN_OR_RETURN(w.wq, bind_matrix(f, p + "attn_q.weight", c.q_dim(), c.n_embd));
    const bool owns_kv = c.owns_kv(l);  // CLA: a layer reading an earlier layer's K/V has no K/V weights
    if (owns_kv) {
      PAGODA_ASSIGN_OR_RETURN(w.wk, bind_matrix(f, p + "attn_k.weight", c.kv_dim(), c.n_embd));
      PAGODA_ASSIGN_OR_RETURN(w.wv, bind_matrix(f, p + "attn_v.weight", c.kv_dim(), c.n_embd));
    }
    PAGODA_ASSIGN_OR_RETURN(w.wo, bind_matrix(f, p + "attn_output.weight", c.n_embd, c.q_dim()));
    PAGODA_RETURN_IF_ERROR(bind_ffn(f, c, l, w));
    if (c.has_qkv_bias) {
      PAGODA_ASSIGN_OR_RETURN(w.bq, load_vector(f, p + "attn_q.bias", c.q_dim()));
      if (owns_kv) {
        PAGODA_ASSIGN_OR_RETURN(w.bk, load_vector(f, p + "attn_k.bias", c.kv_dim()));
        PAGODA_ASSIGN_OR_RETURN(w.bv, load_vector(f, p + "attn_v.bias", c.kv_dim()));
      }
    }
    if (c.has_qk_norm) {
      PAGODA_ASSIGN_OR_RETURN(w.q_norm, load_vector(f, p + "attn_q_norm.weight", c.head_dim));
      if (owns_kv) {
        PAGODA_ASSIGN_OR_RETURN(w.k_norm, load_vector(f, p + "attn_k_norm.weight", c.head_dim));
      }
    }
    if (c.post_norms) {
      PAGODA_ASSIGN_OR_RETURN(w.attn_post_norm, load_vector(f, p + "post_attention_norm.weight", c.n_embd));
      PAGODA_ASSIGN_OR_RETURN(w.ffn_post_norm, load_vector(f, p + "post_ffw_norm.weight", c.n_embd));
    }
  }
  return Status::ok();
}

int64_t LlamaModel::weight_bytes() const {
  int64_t bytes = 0;
  auto add = [&](const kernels::WeightView& w) { bytes += static_cast<int64_t>(w.row_bytes()) * w.n_out; };
  for (const LayerWeights& w : layers_) {
    for (const auto* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down, &w.wq_a, &w.wkv_a, &w.w_router,
                          &w.w_gate_shexp, &w.w_up_shexp, &w.w_down_shexp}) {
      if (m->data != nullptr) add(*m);
    }
    for (const auto* experts : {&w.w_gate_exp, &w.w_up_exp, &w.w_down_exp}) {
      for (const kernels::WeightView& e : *experts) add(e);  // every expert (a token reads k of them)
    }
    bytes += static_cast<int64_t>(w.attn_norm.size() + w.ffn_norm.size() + w.q_norm.size() + w.k_norm.size() +
                                  w.attn_post_norm.size() + w.ffn_post_norm.size() +
                                  w.q_a_norm.size() + w.kv_a_norm.size() + w.wk_b.size() + w.wv_b.size() +
                                  w.expert_bias.size()) * 4;
  }
  add(output_);
  return bytes;
}

Status LlamaModel::round_f16_weights_to_bf16() {
  std::vector<kernels::WeightView*> views = {&token_embd_, &output_};
  for (LayerWeights& w : layers_) {
    for (auto* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down, &w.wq_a, &w.wkv_a, &w.w_router,
                    &w.w_gate_shexp, &w.w_up_shexp, &w.w_down_shexp}) {
      views.push_back(m);
    }
    for (auto* experts : {&w.w_gate_exp, &w.w_up_exp, &w.w_down_exp}) {
      for (kernels::WeightView& e : *experts) views.push_back(&e);
    }
  }
  const bool any_f16 = std::any_of(views.begin(), views.end(),
                                   [](const kernels::WeightView* v) { return v->data != nullptr && v->dtype == DType::kF16; });
  if (!any_f16) return Status::ok();
  if (checkpoint_ != nullptr) {
    return Status::invalid_argument("rounding F16 weights to BF16 (--batched-bf16) needs a GGUF model: this folder's "
                                    "tensors are mapped read-only (pagoda convert writes a GGUF file)");
  }
  std::vector<const void*> done;  // a tied output shares the embeddings' memory: round it once
  for (kernels::WeightView* v : views) {
    if (v->data == nullptr || v->dtype != DType::kF16) continue;
    if (std::find(done.begin(), done.end(), v->data) == done.end()) {
      // The file's tensor memory, read into buffers this model owns (GgufFile::read), is writable.
      auto* h = static_cast<uint16_t*>(const_cast<void*>(v->data));
      const int64_t n = v->n_out * v->n_in;
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(fp16_to_fp32(h[i]));
      done.push_back(v->data);
    }
    v->dtype = DType::kBF16;
  }
  return Status::ok();
}

int64_t max_matmul_in(const ModelConfig& c) {
  return std::max({c.n_ff, c.q_dim(), c.n_embd, c.n_head * c.v_head_dim, c.q_lora_rank, c.qk_nope_dim, c.kv_lora_rank,
                   c.n_ff_exp, c.n_ff_shexp()});
}

int64_t max_matmul_out(const ModelConfig& c) {
  return std::max({c.n_vocab, c.n_ff, c.q_dim(), c.n_embd, c.kv_cache_head_dim(), c.q_lora_rank, c.kv_lora_rank,
                   c.v_head_dim, c.n_expert, c.n_ff_exp, c.n_ff_shexp()});
}

ForwardPass::ForwardPass(const LlamaModel& model, ThreadPool& pool, int64_t max_tokens, int64_t max_context,
                         kernels::Isa isa)
    : model_(model),
      pool_(pool),
      max_tokens_(max_tokens),
      max_context_(max_context),
      matmul_(pool, max_tokens, max_matmul_in(model.config()), max_matmul_out(model.config()), isa),
      attention_scratch_(pool.num_threads(), max_context, std::max(model.config().head_dim, model.config().kv_cache_head_dim())),
      isa_(isa),
      window_(model.config().sliding_window) {
  const ModelConfig& c = model.config();
  x_.resize(max_tokens * c.n_embd);
  xb_.resize(max_tokens * c.n_embd);
  q_.resize(max_tokens * c.q_dim());
  k_.resize(max_tokens * c.kv_dim());
  v_.resize(max_tokens * c.kv_dim());
  att_.resize(max_tokens * c.q_dim());
  const int64_t ff_widest = std::max({c.n_ff, c.n_ff_exp, c.n_ff_shexp()});
  gate_.resize(max_tokens * ff_widest);
  up_.resize(max_tokens * ff_widest);
  if (c.is_moe()) {
    router_.resize(max_tokens * c.n_expert);
    route_scratch_.resize(3 * c.n_expert);
    expert_tokens_.assign(c.n_layer * c.n_expert, 0);
    route_ids_.resize(max_tokens * c.n_expert_used);
    route_weights_.resize(max_tokens * c.n_expert_used);
    expert_begin_.resize(c.n_expert + 1);
    expert_fill_.resize(c.n_expert);
    expert_rows_.resize(max_tokens * c.n_expert_used);
    moe_in_.resize(max_tokens * c.n_embd);
    moe_out_.resize(max_tokens * c.n_embd);
    moe_acc_.resize(max_tokens * c.n_embd);
  }
  if (c.is_mla()) {
    const int64_t latent = c.kv_cache_head_dim();
    latent_rope_ = c.rope;
    latent_rope_.head_dim = latent;
    q_a_.resize(max_tokens * c.q_lora_rank);
    kv_a_.resize(max_tokens * latent);
    q_abs_.resize(max_tokens * c.n_head * latent);
    att_latent_.resize(max_tokens * c.n_head * c.kv_lora_rank);
    head_in_.resize(max_tokens * std::max(c.qk_nope_dim, c.kv_lora_rank));
    head_out_.resize(max_tokens * std::max(c.kv_lora_rank, c.v_head_dim));
    att_.resize(max_tokens * std::max(c.q_dim(), c.n_head * c.v_head_dim));
    mla_gemm_ = std::make_unique<kernels::MlaGemmScratch>(pool.num_threads(), max_tokens, c.n_head, latent);
    mla_gemm_->reserve_expanded(c.qk_nope_dim + c.qk_rope_dim, c.v_head_dim);
    mla_seq_.resize(max_tokens);
    mla_expanded_.resize(max_tokens);
    absorbed_rows_.resize(max_tokens);
  }
}

void ForwardPass::forward(const Batch& batch, std::span<const kernels::KvLayerView> kv_layers, float* logits) {
  const ModelConfig& c = model_.config();
  if (c.is_mla()) {
    forward_mla(batch, kv_layers, logits);
    return;
  }
  if (c.arch == Arch::kGemma3) {
    forward_gemma3(batch, kv_layers, logits);
    return;
  }
  const int64_t T = batch.n_tokens();
  const int64_t d = c.n_embd;
  CHECK(T > 0 && T <= max_tokens_) << "batch of " << T << " tokens, max " << max_tokens_;
  CHECK_EQ(static_cast<int64_t>(batch.positions.size()), T);
  CHECK_EQ(static_cast<int64_t>(batch.slot_mapping.size()), T);
  CHECK_EQ(static_cast<int64_t>(kv_layers.size()), c.n_layer);
  CHECK(batch.rope_positions.empty() || static_cast<int64_t>(batch.rope_positions.size()) == T);
  const int32_t* rope_positions = batch.rope_positions.empty() ? batch.positions.data() : batch.rope_positions.data();
  float* x = x_.data();
  float* xb = xb_.data();

  embed(batch);

  const kernels::AttentionParams attn{c.n_head, c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                                      window_, n_sinks_};
  auto add_bias = [&](float* y, const std::vector<float>& bias) {
    if (bias.empty()) return;
    const int64_t n = static_cast<int64_t>(bias.size());
    for (int64_t t = 0; t < T; ++t) kernels::add_inplace(y + t * n, bias.data(), n);
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = model_.layer(l);
    // Attention block.
    kernels::rmsnorm(x, w.attn_norm.data(), xb, T, d, c.rms_eps);
    // CLA: a layer without K/V of its own attends over its source layer's (kv_layers[l] is that
    // layer's view; the source, earlier in this pass, has stored this batch's rows already).
    const bool owns_kv = c.owns_kv(l);
    matmul_.run(w.wq, xb, T, q_.data());
    add_bias(q_.data(), w.bq);
    if (owns_kv) {
      matmul_.run(w.wk, xb, T, k_.data());
      matmul_.run(w.wv, xb, T, v_.data());
      add_bias(k_.data(), w.bk);
      add_bias(v_.data(), w.bv);
    }
    if (!w.q_norm.empty()) {  // qwen3: each head normed on its own, in place
      kernels::rmsnorm(q_.data(), w.q_norm.data(), q_.data(), T * c.n_head, c.head_dim, c.rms_eps);
      if (owns_kv) kernels::rmsnorm(k_.data(), w.k_norm.data(), k_.data(), T * c.n_kv_head, c.head_dim, c.rms_eps);
    }
    kernels::rope(q_.data(), rope_positions, T, c.n_head, c.rope);
    if (owns_kv) {
      kernels::rope(k_.data(), rope_positions, T, c.n_kv_head, c.rope);
      kernels::store_kv(kv_layers[l], k_.data(), v_.data(), batch.slots_of(l).data(), T, isa_);
    }
    kernels::AttentionScores scores;  // this layer's slices of batch.scores
    if (batch.scores != nullptr) {
      scores.data = batch.scores + l * c.n_kv_head * batch.score_stride;
      scores.seq_stride = c.n_layer * c.n_kv_head * batch.score_stride;
      scores.head_stride = batch.score_stride;
      scores.observe_from = batch.observe_from;
    }
    kernels::paged_attention(kv_layers[l], q_.data(), batch.positions.data(), batch.seqs_of(l).data(),
                             static_cast<int64_t>(batch.seqs.size()), attn, att_.data(), pool_,
                             attention_scratch_, isa_);
    if (batch.scores != nullptr) {
      kernels::paged_attention_scores(kv_layers[l], q_.data(), batch.positions.data(), batch.seqs_of(l).data(),
                                      static_cast<int64_t>(batch.seqs.size()), attn, scores, pool_,
                                      attention_scratch_, isa_);
    }
    matmul_.run(w.wo, att_.data(), T, xb);
    kernels::add_inplace(x, xb, T * d);
    feed_forward(w, l, T);
  }

  classify(batch, logits);
}

void ForwardPass::embed(const Batch& batch) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.n_embd;
  const kernels::WeightView& emb = model_.token_embedding();
  for (int64_t t = 0; t < batch.n_tokens(); ++t) {
    const int32_t id = batch.tokens[t];
    CHECK(id >= 0 && id < c.n_vocab) << "token id " << id << " outside the vocabulary";
    kernels::dequantize_row(emb.dtype, emb.row(id), x_.data() + t * d, d);
  }
}

void ForwardPass::feed_forward(const LayerWeights& w, int64_t l, int64_t T) {
  // Feed-forward block (SwiGLU): x += (silu(h Wgate) * (h Wup)) Wdown, h = rmsnorm(x).
  const ModelConfig& c = model_.config();
  if (w.is_moe()) {
    feed_forward_moe(w, l, T);
    return;
  }
  const int64_t d = c.n_embd, ff = c.n_ff;
  float* x = x_.data();
  float* xb = xb_.data();
  kernels::rmsnorm(x, w.ffn_norm.data(), xb, T, d, c.rms_eps);
  matmul_.run(w.w_gate, xb, T, gate_.data());
  matmul_.run(w.w_up, xb, T, up_.data());
  pool_.parallel_for(T * ff, [&](int64_t b, int64_t e, int) { kernels::silu_mul(gate_.data() + b, up_.data() + b, e - b, isa_); }, 1024);
  matmul_.run(w.w_down, gate_.data(), T, xb);
  kernels::add_inplace(x, xb, T * d);
}

void ForwardPass::classify(const Batch& batch, float* logits) {
  const ModelConfig& c = model_.config();
  const int64_t T = batch.n_tokens();
  const int64_t d = c.n_embd;
  float* x = x_.data();
  float* xb = xb_.data();
  // Classifier over the requested rows only.
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  if (R == 0) return;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t row = batch.logit_rows[r];
    CHECK(row >= 0 && row < T) << "logit row " << row;
    kernels::rmsnorm(x + row * d, model_.output_norm().data(), xb + r * d, 1, d, c.rms_eps);
  }
  for (int64_t r0 = 0; r0 < R; r0 += max_tokens_) {
    const int64_t n = std::min(max_tokens_, R - r0);
    matmul_.run(model_.output(), xb + r0 * d, n, logits + r0 * c.n_vocab);
  }
  if (c.final_logit_softcap > 0) {  // gemma: cap * tanh(z / cap)
    const float cap = c.final_logit_softcap;
    pool_.parallel_for(R * c.n_vocab, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    }, 4096);
  }
}

kernels::AttentionParams ForwardPass::layer_attention(int64_t l, float scale) const {
  const int64_t own = model_.config().window_of(l);
  if (own > 0 && (window_ == 0 || own < window_)) return kernels::AttentionParams{model_.config().n_head, scale, own, 0};
  return kernels::AttentionParams{model_.config().n_head, scale, window_, n_sinks_};
}

}  // namespace pagoda::model
