#include "model/model_factory.h"

#include <cmath>
#include <tuple>
#include <cstdio>

#include "core/rng.h"
#include "kernels/quant.h"
#include "model/arch/registry.h"
#include "model/text/gguf_vocab.h"

namespace pagoda::model {

namespace {
constexpr uint32_t kGgmlF32 = 0;
}  // namespace

Status add_random_f32(GgufFile& file, const std::string& name, int64_t n, float lo, float hi, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return file.add_tensor(name, {n}, kGgmlF32, v.data(), v.size() * sizeof(float));
}

Status add_random_matrix(GgufFile& file, const std::string& name, int64_t n_out, int64_t n_in, DType dtype,
                         Rng& rng) {
  const float a = std::sqrt(3.0f / static_cast<float>(n_in));
  const size_t row_bytes = dtype_row_bytes(dtype, n_in);
  std::vector<uint8_t> data(row_bytes * n_out);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    for (auto& v : row) v = rng.uniform(-a, a);
    kernels::quantize_row(dtype, row.data(), data.data() + o * row_bytes, n_in);
  }
  return file.add_tensor(name, {n_in, n_out}, ggml_type_from_dtype(dtype), data.data(), data.size());
}

namespace {

Status add_random_vector(GgufFile& file, const std::string& name, int64_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(-0.5f, 0.5f);
  return file.add_tensor(name, {n}, kGgmlF32, v.data(), v.size() * sizeof(float));
}

Status add_ones(GgufFile& file, const std::string& name, int64_t n, float value = 1.0f) {
  std::vector<float> ones(n, value);
  return file.add_tensor(name, {n}, kGgmlF32, ones.data(), ones.size() * sizeof(float));
}

}  // namespace

ModelShape with_experts(ModelShape s, int64_t n_expert, int64_t n_expert_used, int64_t n_ff_exp) {
  s.n_expert = n_expert;
  s.n_expert_used = n_expert_used;
  s.n_ff_exp = n_ff_exp;
  return s;
}

// DeepSeek's MoE on an MLA shape: the first layer dense, `shared` shared experts, and V2's
// rule (softmax, not renormalized) or V3's (sigmoid + bias, 4 groups of which 2, renormalized,
// scale 2.5).
ModelShape with_deepseek_experts(ModelShape s, int64_t n_expert, int64_t n_expert_used, int64_t n_ff_exp,
                                 int64_t shared, bool v3) {
  s = with_experts(std::move(s), n_expert, n_expert_used, n_ff_exp);
  s.n_expert_shared = shared;
  s.n_dense_lead = 1;
  if (v3) {
    s.routing = ExpertRouting{ExpertGating::kSigmoid, /*normalize=*/true, /*scale=*/2.5f, /*n_groups=*/4,
                              /*n_groups_used=*/2};
    s.expert_bias = true;
  } else {
    s.routing = ExpertRouting{ExpertGating::kSoftmax, /*normalize=*/false, /*scale=*/1.0f, 1, 1};
  }
  return s;
}

const std::vector<ModelShape>& model_shapes() {
  static const std::vector<ModelShape> kShapes = {
      {"default", 256, 4, 8, 4, 768, 512, 2048},
      {"tiny", 64, 2, 4, 2, 96, 320, 512},
      {"tiny-qwen3", 64, 2, 4, 2, 96, 320, 512, "qwen3"},
      {"llama-110m", 768, 12, 12, 12, 2048, 32000, 2048},
      {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048},
      {"tiny-mla", 64, 2, 4, 4, 96, 320, 512, "deepseek2", 0, 0, 32, 16, 8, 16},
      {"tiny-mla-q", 64, 2, 4, 4, 96, 320, 512, "deepseek2", 0, 24, 32, 16, 8, 24, 4.0},
      {"dsv2-lite", 2048, 27, 16, 16, 1408, 32000, 4096, "deepseek2", 0, 0, 512, 128, 64, 128},
      {"dsv2-lite-gqa", 2048, 27, 16, 4, 1408, 32000, 4096},
      {"dsv2-mini", 2048, 4, 16, 16, 1408, 32000, 4096, "deepseek2", 0, 0, 512, 128, 64, 128},
      {"dsv2-mini-gqa", 2048, 4, 16, 4, 1408, 32000, 4096},
      // dsv2-mini with V2's q LoRA (1536): llama.cpp requires q_lora_rank below 27 layers, so
      // the MLA prefill side by side (bench/peer/mla_prefill_rounds.py) uses this one.
      {"dsv2-mini-q", 2048, 4, 16, 16, 1408, 32000, 4096, "deepseek2", 0, 1536, 512, 128, 64, 128},
      // Gemma 3: windows of 8 over blocks of 4 in the tests; 270M's geometry (head 256, window
      // 512, one global layer in six) for benchmarks.
      {"tiny-gemma3", 64, 4, 4, 2, 96, 320, 512, "gemma3", 8, 0, 0, 0, 0, 0, 0, 0, 32, 3},
      {"gemma3-270m", 640, 18, 4, 1, 2048, 32000, 32768, "gemma3", 512, 0, 0, 0, 0, 0, 0, 0, 256, 6},
      // Cross-checks against llama.cpp (bench/peer/arch_crosscheck.sh): small layers, a 32000
      // vocabulary (llama-server fails on a lone byte token's invalid UTF-8, which the 320-token
      // test vocabularies generate often), windows shorter than the prompt.
      {"xc-llama", 128, 4, 4, 2, 256, 32000, 4096},
      {"xc-qwen3", 128, 4, 4, 2, 256, 32000, 4096, "qwen3"},
      {"xc-mla", 128, 4, 4, 4, 256, 32000, 4096, "deepseek2", 0, 48, 64, 32, 16, 32, 4.0},
      {"xc-gemma3", 128, 6, 4, 2, 256, 32000, 4096, "gemma3", 64, 0, 0, 0, 0, 0, 0, 0, 64, 3},
      with_experts({"tiny-qwen3moe", 64, 2, 4, 2, 96, 320, 512, "qwen3moe"}, 8, 2, 32),
      with_experts({"xc-qwen3moe", 128, 4, 4, 2, 256, 32000, 4096, "qwen3moe"}, 16, 4, 64),
      // Benchmarks: 64 experts of 512, 8 per token, 12 layers of 1024 (1.3 B parameters, 0.2 B
      // active): a Qwen3-30B-A3B-like ratio that fits a small machine.
      with_experts({"qwen3moe-1b", 1024, 12, 16, 4, 3072, 32000, 4096, "qwen3moe"}, 64, 8, 512),
      // DeepSeek MoE: MLA layers as tiny-mla-q / xc-mla (llama.cpp reads q_lora_rank as
      // required but for 26- or 27-layer "lite" files), layer 0 dense.
      with_deepseek_experts({"tiny-dsv2moe", 64, 3, 4, 4, 96, 320, 512, "deepseek2", 0, 32, 32, 16, 8, 16}, 8, 2, 32, 2, false),
      with_deepseek_experts({"tiny-dsv3moe", 64, 3, 4, 4, 96, 320, 512, "deepseek2", 0, 32, 32, 16, 8, 16}, 8, 2, 32, 1, true),
      with_deepseek_experts({"xc-dsv2moe", 128, 4, 4, 4, 256, 32000, 4096, "deepseek2", 0, 48, 64, 32, 16, 32}, 16, 4, 64, 2, false),
      // DeepSeek-V2-Lite's geometry whole (15.7 B parameters, 2.4 B active; 27 layers, which
      // llama.cpp takes for "lite": no q LoRA): benchmarks of MoE decode on the latent cache.
      with_deepseek_experts({"dsv2-lite-moe", 2048, 27, 16, 16, 10944, 102400, 8192, "deepseek2", 0, 0, 512, 128, 64, 128},
                            64, 6, 1408, 2, false),
      with_deepseek_experts({"xc-dsv3moe", 128, 4, 4, 4, 256, 32000, 4096, "deepseek2", 0, 48, 64, 32, 16, 32}, 16, 4, 64, 1, true),
  };
  return kShapes;
}

Result<ModelShape> find_model_shape(const std::string& name) {
  std::string known;
  for (const ModelShape& s : model_shapes()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  return Status::error("unknown model shape '" + name + "' (known: " + known + ")");
}

Vocab make_synthetic_vocab(int64_t n_vocab) {
  CHECK_GE(n_vocab, 260);
  Vocab v;
  auto add = [&](std::string text, TokenType type) {
    v.tokens.push_back(std::move(text));
    v.types.push_back(type);
    v.scores.push_back(type == TokenType::kNormal ? -static_cast<float>(v.tokens.size()) : 0.0f);
  };
  add("<unk>", TokenType::kUnknown);
  add("<s>", TokenType::kControl);
  add("</s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, TokenType::kByte);
  }
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  add(space, TokenType::kNormal);
  for (char c = 0x21; c < 0x7f && static_cast<int64_t>(v.tokens.size()) < n_vocab; ++c) add(std::string(1, c), TokenType::kNormal);
  // Multi-letter pieces: "▁x", then "xy", "▁xy", "xyz", ... until full.
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  std::vector<std::string> frontier = {""};
  while (static_cast<int64_t>(v.tokens.size()) < n_vocab) {
    std::vector<std::string> next;
    for (const std::string& prefix : frontier) {
      for (char c : letters) next.push_back(prefix + c);
    }
    for (const std::string& piece : next) {
      if (static_cast<int64_t>(v.tokens.size()) >= n_vocab) break;
      add(space + piece, TokenType::kNormal);
      if (piece.size() >= 2 && static_cast<int64_t>(v.tokens.size()) < n_vocab) add(piece, TokenType::kNormal);
    }
    frontier = std::move(next);
  }
  return v;
}

Result<WeightMix> find_weight_mix(const std::string& name) {
  struct Known {
    const char* name;
    DType base;
    bool k_m;
    uint32_t file_type;
  };
  static constexpr Known kMixes[] = {
      {"f32", DType::kF32, false, 0},     {"f16", DType::kF16, false, 1},     {"bf16", DType::kBF16, false, 32},
      {"q8_0", DType::kQ8_0, false, 7},   {"q4_0", DType::kQ4_0, false, 2},   {"q4_k", DType::kQ4_K, false, 14},
      {"q5_k", DType::kQ5_K, false, 16},  {"q6_k", DType::kQ6_K, false, 18},  {"q4_k_m", DType::kQ4_K, true, 15},
      {"q5_k_m", DType::kQ5_K, true, 17},
  };
  std::string known;
  for (const Known& k : kMixes) {
    if (name == k.name) return WeightMix{k.name, k.base, k.k_m, k.file_type};
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  return Status::invalid_argument("unknown weight type '" + name + "' (known: " + known + ")");
}

DType weight_dtype(const WeightMix& mix, const std::string& tensor, int64_t n_in, int64_t n_layer) {
  DType dtype = mix.base;
  if (mix.k_m) {
    int layer = -1;
    char role[32] = {};
    const bool per_layer = std::sscanf(tensor.c_str(), "blk.%d.%31[a-z_]", &layer, role) == 2;
    const int64_t n = n_layer, i = layer;
    const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    const std::string r = role;
    if (tensor == "output.weight") dtype = DType::kQ6_K;
    if (per_layer && (r == "attn_v" || r == "ffn_down") && more_bits) dtype = DType::kQ6_K;
  }
  if (n_in % dtype_info(dtype).block_elems != 0) dtype = DType::kQ8_0;  // see the header
  // The expert router stays F32, as llama.cpp's quantizer leaves it: a token's expert choice
  // should not hinge on rounding.
  if (tensor.find("ffn_gate_inp.weight") != std::string::npos) dtype = DType::kF32;
  return dtype;
}

GgufFile random_model_header(const std::string& arch, const ModelShape& s, const WeightMix& mix) {
  auto u32 = [](int64_t v) { return GgufValue::of_u32(static_cast<uint32_t>(v)); };
  const std::string a = arch + ".";
  GgufFile f;
  f.set("general.architecture", GgufValue::of_string(arch));
  f.set("general.name", GgufValue::of_string("pagoda-random-" + s.name + "-" + mix.name));
  f.set("general.file_type", GgufValue::of_u32(mix.file_type));
  f.set(a + "context_length", u32(s.n_ctx));
  f.set(a + "embedding_length", u32(s.n_embd));
  f.set(a + "block_count", u32(s.n_layer));
  f.set(a + "feed_forward_length", u32(s.n_ff));
  return f;
}

Result<GgufFile> make_random_mla_model(const ModelShape& s, const WeightMix& mix, uint64_t seed,
                                       const std::function<void(int64_t, int64_t)>& progress);

Result<GgufFile> make_random_model(const ModelShape& s, DType dtype, uint64_t seed) {
  PAGODA_ASSIGN_OR_RETURN(WeightMix mix, find_weight_mix(std::string(dtype_name(dtype))));
  return make_random_model(s, mix, seed);
}

namespace {

// Layer l's router (F32 in every mix), selection bias (shape.expert_bias), each weight of
// every expert as one 3-D tensor {n_in, n_out, n_expert}, and the shared experts' weights.
Status add_random_experts(GgufFile& f, const ModelShape& s, const WeightMix& mix, int64_t l, Rng& rng) {
  const std::string p = "blk." + std::to_string(l) + ".";
  auto add_weight = [&](const std::string& name, int64_t n_out, int64_t n_in) {
    return add_random_matrix(f, name, n_out, n_in, weight_dtype(mix, name, n_in, s.n_layer), rng);
  };
  PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_gate_inp.weight", s.n_expert, s.n_embd));
  if (s.expert_bias) PAGODA_RETURN_IF_ERROR(add_random_f32(f, p + "exp_probs_b.bias", s.n_expert, -0.1f, 0.1f, rng));
  for (const auto& [name, n_out, n_in] : {std::tuple{"ffn_gate_exps", s.n_ff_exp, s.n_embd},
                                          std::tuple{"ffn_up_exps", s.n_ff_exp, s.n_embd},
                                          std::tuple{"ffn_down_exps", s.n_embd, s.n_ff_exp}}) {
    const std::string tensor = p + name + ".weight";
    const DType dtype = weight_dtype(mix, tensor, n_in, s.n_layer);
    const float lim = std::sqrt(3.0f / static_cast<float>(n_in));
    const size_t row_bytes = dtype_row_bytes(dtype, n_in);
    std::vector<uint8_t> data(row_bytes * static_cast<size_t>(s.n_expert * n_out));
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < s.n_expert * n_out; ++o) {
      for (auto& v : row) v = rng.uniform(-lim, lim);
      kernels::quantize_row(dtype, row.data(), data.data() + o * row_bytes, n_in);
    }
    PAGODA_RETURN_IF_ERROR(f.add_tensor(tensor, {n_in, n_out, s.n_expert}, ggml_type_from_dtype(dtype), data.data(), data.size()));
  }
  if (s.n_expert_shared > 0) {
    const int64_t ff = s.n_ff_exp * s.n_expert_shared;
    PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_gate_shexp.weight", ff, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_up_shexp.weight", ff, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_down_shexp.weight", s.n_embd, ff));
  }
  return Status::ok();
}

}  // namespace

Result<GgufFile> make_random_model(const ModelShape& s, const WeightMix& mix, uint64_t seed,
                                   const std::function<void(int64_t, int64_t)>& progress) {
  auto report = [&](int64_t done) {
    if (progress) progress(done, s.n_layer + 2);
  };
  const arch::ArchInfo* family = arch::find_gguf(s.arch);
  if (family != nullptr && family->write_random) return family->write_random(s, mix, seed, progress);
  // Written here: MLA (deepseek2) and the plain families (llama, qwen2, qwen3).
  if (family == nullptr || !family->arch) {
    return Status::error("make-model cannot write architecture '" + s.arch + "'");
  }
  if (family->mla) {
    if (s.cla > 1) return Status::error("--cla is for llama/qwen2 shapes, not MLA");
    return make_random_mla_model(s, mix, seed, progress);
  }
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_kv_head != 0) return Status::error("bad shape " + s.name);
  for (int64_t n_in : {s.n_embd, s.n_ff}) {
    if (n_in % dtype_info(weight_dtype(mix, "blk.0.ffn_up.weight", n_in, s.n_layer)).block_elems != 0) {
      return Status::error("shape " + s.name + " does not fit " + mix.name + " blocks");
    }
  }
  const int64_t head_dim = s.n_embd / s.n_head;
  const std::string a = s.arch + ".";
  GgufFile f = random_model_header(s.arch, s, mix);
  if (s.sliding_window > 0) {
    f.set(a + "attention.sliding_window", GgufValue::of_u32(static_cast<uint32_t>(s.sliding_window)));
  }
  f.set(a + "attention.head_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_head)));
  f.set(a + "attention.head_count_kv", GgufValue::of_u32(static_cast<uint32_t>(s.n_kv_head)));
  f.set(a + "rope.dimension_count", GgufValue::of_u32(static_cast<uint32_t>(head_dim)));
  f.set(a + "rope.freq_base", GgufValue::of_f32(10000.0f));
  f.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
  f.set(a + "vocab_size", GgufValue::of_u32(static_cast<uint32_t>(s.n_vocab)));
  if (family->moe) {
    if (s.n_expert < 1 || s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_ff_exp < 1) {
      return Status::error("shape " + s.name + " needs experts (n_expert >= n_expert_used >= 1, n_ff_exp >= 1)");
    }
    f.set(a + "expert_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_expert)));
    f.set(a + "expert_used_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_expert_used)));
    f.set(a + "expert_feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(s.n_ff_exp)));
  }
  if (s.cla > 1) {
    std::vector<int32_t> sources(s.n_layer);
    for (int64_t l = 0; l < s.n_layer; ++l) sources[l] = static_cast<int32_t>(l - l % s.cla);
    f.set(a + "attention.kv_source_layer", GgufValue::i32_array(sources));
  }
  vocab_to_gguf(make_synthetic_vocab(s.n_vocab), f);

  Rng rng(seed);
  const int64_t q_dim = s.n_embd, kv_dim = s.n_kv_head * head_dim;
  // A [n_out, n_in] weight in the dtype the mix gives it.
  auto add_weight = [&](const std::string& name, int64_t n_out, int64_t n_in) {
    return add_random_matrix(f, name, n_out, n_in, weight_dtype(mix, name, n_in, s.n_layer), rng);
  };
  PAGODA_RETURN_IF_ERROR(add_weight("token_embd.weight", s.n_vocab, s.n_embd));
  report(1);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    PAGODA_RETURN_IF_ERROR(add_ones(f, p + "attn_norm.weight", s.n_embd));
    const bool owns_kv = s.cla <= 1 || l % s.cla == 0;
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_q.weight", q_dim, s.n_embd));
    if (owns_kv) {
      PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_k.weight", kv_dim, s.n_embd));
      PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_v.weight", kv_dim, s.n_embd));
    }
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_output.weight", s.n_embd, q_dim));
    if (family->qk_norm) {  // qwen3: per-head norms, random so that they matter
      PAGODA_RETURN_IF_ERROR(add_random_f32(f, p + "attn_q_norm.weight", head_dim, 0.5f, 1.5f, rng));
      if (owns_kv) PAGODA_RETURN_IF_ERROR(add_random_f32(f, p + "attn_k_norm.weight", head_dim, 0.5f, 1.5f, rng));
    }
    if (family->qkv_bias) {
      PAGODA_RETURN_IF_ERROR(add_random_vector(f, p + "attn_q.bias", q_dim, rng));
      if (owns_kv) {
        PAGODA_RETURN_IF_ERROR(add_random_vector(f, p + "attn_k.bias", kv_dim, rng));
        PAGODA_RETURN_IF_ERROR(add_random_vector(f, p + "attn_v.bias", kv_dim, rng));
      }
    }
    PAGODA_RETURN_IF_ERROR(add_ones(f, p + "ffn_norm.weight", s.n_embd));
    if (family->moe) {
      PAGODA_RETURN_IF_ERROR(add_random_experts(f, s, mix, l, rng));
    } else {
      PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_gate.weight", s.n_ff, s.n_embd));
      PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_up.weight", s.n_ff, s.n_embd));
      PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_down.weight", s.n_embd, s.n_ff));
    }
    report(l + 2);
  }
  PAGODA_RETURN_IF_ERROR(add_ones(f, "output_norm.weight", s.n_embd, s.output_norm_scale));
  PAGODA_RETURN_IF_ERROR(add_weight("output.weight", s.n_vocab, s.n_embd));
  report(s.n_layer + 2);
  return f;
}

Result<GgufFile> make_random_mla_model(const ModelShape& s, const WeightMix& mix, uint64_t seed,
                                       const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t H = s.n_head, r = s.kv_lora_rank, dn = s.qk_nope_dim, dr = s.qk_rope_dim, dv = s.v_head_dim;
  if (r <= 0 || dn <= 0 || dr <= 0 || dr % 2 != 0 || dv <= 0 || s.q_lora_rank < 0) {
    return Status::error("bad MLA shape " + s.name);
  }
  for (int64_t n_in : {s.n_embd, s.q_lora_rank, r, H * dv, s.n_ff, s.n_ff_exp}) {  // every weight's rows
    if (n_in > 0 && n_in % dtype_info(weight_dtype(mix, "blk.0.ffn_up.weight", n_in, s.n_layer)).block_elems != 0) {
      return Status::error("shape " + s.name + " does not fit " + mix.name + " blocks (rows of " + std::to_string(n_in) + ")");
    }
  }
  auto u32 = [](int64_t v) { return GgufValue::of_u32(static_cast<uint32_t>(v)); };
  const std::string a = s.arch + ".";
  GgufFile f = random_model_header(s.arch, s, mix);
  const bool moe = s.n_expert > 0;
  if (moe) {  // DeepSeek MoE after n_dense_lead dense layers (model/moe.h)
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_ff_exp < 1 || s.n_dense_lead < 0 ||
        s.n_dense_lead >= s.n_layer || s.n_expert_shared < 0) {
      return Status::error("bad MoE shape " + s.name);
    }
    f.set(a + "leading_dense_block_count", u32(s.n_dense_lead));
    f.set(a + "expert_count", u32(s.n_expert));
    f.set(a + "expert_used_count", u32(s.n_expert_used));
    f.set(a + "expert_feed_forward_length", u32(s.n_ff_exp));
    f.set(a + "expert_shared_count", u32(s.n_expert_shared));
    f.set(a + "expert_gating_func", u32(s.routing.gating == ExpertGating::kSigmoid ? 2 : 1));
    f.set(a + "expert_weights_norm", GgufValue::of_bool(s.routing.normalize));
    f.set(a + "expert_weights_scale", GgufValue::of_f32(s.routing.scale));
    if (s.routing.n_groups > 1) {
      f.set(a + "expert_group_count", u32(s.routing.n_groups));
      f.set(a + "expert_group_used_count", u32(s.routing.n_groups_used));
    }
  } else {
    f.set(a + "leading_dense_block_count", u32(s.n_layer));
    // Every layer is dense; llama.cpp reads these two keys of a deepseek2 file all the same.
    f.set(a + "expert_feed_forward_length", u32(s.n_ff));
    f.set(a + "expert_shared_count", u32(0));
  }
  f.set(a + "attention.head_count", u32(H));
  f.set(a + "attention.head_count_kv", u32(H));
  f.set(a + "attention.key_length", u32(dn + dr));
  f.set(a + "attention.value_length", u32(dv));
  f.set(a + "attention.kv_lora_rank", u32(r));
  if (s.q_lora_rank > 0) f.set(a + "attention.q_lora_rank", u32(s.q_lora_rank));
  f.set(a + "rope.dimension_count", u32(dr));
  f.set(a + "rope.freq_base", GgufValue::of_f32(10000.0f));
  if (s.yarn_factor > 1) {
    f.set(a + "rope.scaling.type", GgufValue::of_string("yarn"));
    f.set(a + "rope.scaling.factor", GgufValue::of_f32(static_cast<float>(s.yarn_factor)));
    f.set(a + "rope.scaling.original_context_length", u32(static_cast<int64_t>(s.n_ctx / s.yarn_factor)));
    f.set(a + "rope.scaling.yarn_log_multiplier", GgufValue::of_f32(0.0707f));
  }
  f.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-6f));
  f.set(a + "vocab_size", u32(s.n_vocab));
  vocab_to_gguf(make_synthetic_vocab(s.n_vocab), f);

  Rng rng(seed);
  auto add_weight = [&](const std::string& name, int64_t n_out, int64_t n_in) {
    return add_random_matrix(f, name, n_out, n_in, weight_dtype(mix, name, n_in, s.n_layer), rng);
  };
  auto report = [&](int64_t done) {
    if (progress) progress(done, s.n_layer + 2);
  };
  PAGODA_RETURN_IF_ERROR(add_weight("token_embd.weight", s.n_vocab, s.n_embd));
  report(1);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    PAGODA_RETURN_IF_ERROR(add_ones(f, p + "attn_norm.weight", s.n_embd));
    if (s.q_lora_rank > 0) {
      PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_q_a.weight", s.q_lora_rank, s.n_embd));
      PAGODA_RETURN_IF_ERROR(add_ones(f, p + "attn_q_a_norm.weight", s.q_lora_rank));
      PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_q_b.weight", H * (dn + dr), s.q_lora_rank));
    } else {
      PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_q.weight", H * (dn + dr), s.n_embd));
    }
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_kv_a_mqa.weight", r + dr, s.n_embd));
    PAGODA_RETURN_IF_ERROR(add_ones(f, p + "attn_kv_a_norm.weight", r));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_kv_b.weight", H * (dn + dv), r));
    PAGODA_RETURN_IF_ERROR(add_weight(p + "attn_output.weight", s.n_embd, H * dv));
    PAGODA_RETURN_IF_ERROR(add_ones(f, p + "ffn_norm.weight", s.n_embd));
    if (moe && l >= s.n_dense_lead) {
      PAGODA_RETURN_IF_ERROR(add_random_experts(f, s, mix, l, rng));
    } else {
      PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_gate.weight", s.n_ff, s.n_embd));
      PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_up.weight", s.n_ff, s.n_embd));
      PAGODA_RETURN_IF_ERROR(add_weight(p + "ffn_down.weight", s.n_embd, s.n_ff));
    }
    report(l + 2);
  }
  PAGODA_RETURN_IF_ERROR(add_ones(f, "output_norm.weight", s.n_embd, s.output_norm_scale));
  PAGODA_RETURN_IF_ERROR(add_weight("output.weight", s.n_vocab, s.n_embd));
  report(s.n_layer + 2);
  return f;
}

Result<GgufFile> make_default_model() {
  PAGODA_ASSIGN_OR_RETURN(ModelShape shape, find_model_shape("default"));
  return make_random_model(shape, DType::kF32, 1234);
}

}  // namespace pagoda::model
