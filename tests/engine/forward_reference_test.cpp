// The engine's logits against a float64 forward pass written here with plain loops and a
// contiguous KV cache, on random models of many shapes and every weight type.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "kernels/quant.h"
#include "model/model_factory.h"

namespace pagoda {
namespace {

using Matrix = std::vector<double>;  // [n_out, n_in] row-major

Matrix load_matrix(const model::GgufFile& f, const std::string& name) {
  const model::GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  const int64_t n_in = t->dims[0];
  const int64_t n_out = t->dims.size() > 1 ? t->dims[1] : 1;
  const size_t row_bytes = dtype_row_bytes(*t->dtype, n_in);
  Matrix m(n_out * n_in);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    kernels::dequantize_row(*t->dtype, f.tensor_data(*t) + o * row_bytes, row.data(), n_in);
    for (int64_t i = 0; i < n_in; ++i) m[o * n_in + i] = row[i];
  }
  return m;
}

std::vector<double> matvec(const Matrix& w, const std::vector<double>& x, int64_t n_out) {
  const int64_t n_in = static_cast<int64_t>(x.size());
  std::vector<double> y(n_out, 0.0);
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t i = 0; i < n_in; ++i) y[o] += w[o * n_in + i] * x[i];
  }
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const Matrix& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

// neox: rotate (i, i + hd/2) (qwen2); else adjacent pairs (2i, 2i+1) (llama).
void rope(std::vector<double>& v, int64_t n_heads, int64_t hd, int64_t pos, double base, bool neox) {
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = pos * std::pow(base, -2.0 * i / hd);
      double& a = v[h * hd + (neox ? i : 2 * i)];
      double& b = v[h * hd + (neox ? i + hd / 2 : 2 * i + 1)];
      const double x0 = a, x1 = b;
      a = x0 * std::cos(angle) - x1 * std::sin(angle);
      b = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
  }
}

// Logits [n_tokens, n_vocab] of a llama or qwen2 model, all in double.
std::vector<double> reference_logits(const model::GgufFile& f, const model::ModelShape& s,
                                     const std::vector<int32_t>& tokens) {
  const int64_t hd = s.n_embd / s.n_head, kv_dim = s.n_kv_head * hd, group = s.n_head / s.n_kv_head;
  const Matrix emb = load_matrix(f, "token_embd.weight");
  const Matrix out_norm = load_matrix(f, "output_norm.weight");
  const Matrix out = load_matrix(f, "output.weight");
  struct Layer {
    Matrix an, fn, wq, wk, wv, wo, wg, wu, wd;
    Matrix bq, bk, bv;  // qwen2 only
  };
  const bool qwen2 = s.arch == "qwen2";
  std::vector<Layer> layers;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    layers.push_back({load_matrix(f, p + "attn_norm.weight"), load_matrix(f, p + "ffn_norm.weight"),
                      load_matrix(f, p + "attn_q.weight"), load_matrix(f, p + "attn_k.weight"),
                      load_matrix(f, p + "attn_v.weight"), load_matrix(f, p + "attn_output.weight"),
                      load_matrix(f, p + "ffn_gate.weight"), load_matrix(f, p + "ffn_up.weight"),
                      load_matrix(f, p + "ffn_down.weight")});
    if (qwen2) {
      layers.back().bq = load_matrix(f, p + "attn_q.bias");
      layers.back().bk = load_matrix(f, p + "attn_k.bias");
      layers.back().bv = load_matrix(f, p + "attn_v.bias");
    }
  }
  std::vector<std::vector<std::vector<double>>> k_cache(s.n_layer), v_cache(s.n_layer);  // [layer][pos][kv_dim]
  std::vector<double> logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<double> x(emb.begin() + tokens[pos] * s.n_embd, emb.begin() + (tokens[pos] + 1) * s.n_embd);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const Layer& L = layers[l];
      auto h = rmsnorm(x, L.an, 1e-5);
      auto q = matvec(L.wq, h, s.n_embd);
      auto k = matvec(L.wk, h, kv_dim);
      auto v = matvec(L.wv, h, kv_dim);
      if (qwen2) {
        for (int64_t i = 0; i < s.n_embd; ++i) q[i] += L.bq[i];
        for (int64_t i = 0; i < kv_dim; ++i) k[i] += L.bk[i], v[i] += L.bv[i];
      }
      rope(q, s.n_head, hd, pos, 10000.0, qwen2);
      rope(k, s.n_kv_head, hd, pos, 10000.0, qwen2);
      k_cache[l].push_back(k);
      v_cache[l].push_back(v);
      std::vector<double> att(s.n_embd, 0.0);
      for (int64_t head = 0; head < s.n_head; ++head) {
        const int64_t kvh = head / group;
        std::vector<double> w(pos + 1);
        double mx = -1e300, sum = 0;
        for (size_t t = 0; t <= pos; ++t) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[head * hd + i] * k_cache[l][t][kvh * hd + i];
          w[t] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[t]);
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (size_t t = 0; t <= pos; ++t) {
          for (int64_t i = 0; i < hd; ++i) att[head * hd + i] += w[t] / sum * v_cache[l][t][kvh * hd + i];
        }
      }
      auto o = matvec(L.wo, att, s.n_embd);
      for (int64_t i = 0; i < s.n_embd; ++i) x[i] += o[i];
      h = rmsnorm(x, L.fn, 1e-5);
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

struct Case {
  const char* label;
  model::ModelShape shape;
  DType dtype;
};

// Worst |engine - reference| relative to the largest |reference| logit of the same row.
double max_relative_error(const std::vector<float>& got, const std::vector<double>& want, int64_t n_vocab) {
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

TEST(ForwardReference, EngineMatchesFloat64ForwardOnManyShapesAndTypes) {
  const std::vector<Case> cases = {
      {"MHA hd8 odd sizes f32", {"t", 72, 2, 9, 9, 100, 300, 64}, DType::kF32},
      {"GQA hd8 f16", {"t", 64, 2, 8, 2, 96, 300, 64}, DType::kF16},
      {"MQA hd64 bf16", {"t", 128, 2, 2, 1, 160, 280, 64}, DType::kBF16},
      {"GQA hd128 f32", {"t", 256, 1, 2, 1, 96, 270, 64}, DType::kF32},
      {"GQA hd64 q8_0", {"t", 128, 2, 2, 1, 96, 300, 64}, DType::kQ8_0},
      {"MHA hd8 q4_0", {"t", 64, 2, 8, 8, 128, 300, 64}, DType::kQ4_0},
      {"MQA hd128 q4_0", {"t", 256, 1, 2, 1, 64, 264, 64}, DType::kQ4_0},
      {"qwen2 GQA hd16 f32", {"t", 64, 2, 4, 2, 96, 300, 64, "qwen2"}, DType::kF32},
      {"qwen2 GQA hd32 q8_0", {"t", 128, 2, 4, 2, 96, 300, 64, "qwen2"}, DType::kQ8_0},
  };
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    auto file = model::make_random_model(c.shape, c.dtype, 99);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    std::vector<int32_t> tokens;
    for (int i = 0; i < 21; ++i) tokens.push_back((i * 37 + 5) % static_cast<int32_t>(c.shape.n_vocab));
    const std::vector<double> want = reference_logits(*file, c.shape, tokens);
    // Quantized weights: the decode path also quantizes activations to Q8_0 (as ggml does).
    const bool quantized = c.dtype == DType::kQ8_0 || c.dtype == DType::kQ4_0;
    for (int64_t batch : {1, 16}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + " threads " + std::to_string(threads));
        auto file_copy = model::make_random_model(c.shape, c.dtype, 99);
        auto model = model::LlamaModel::load(std::move(file_copy).value());
        ASSERT_TRUE(model.is_ok()) << model.status().message();
        engine::EngineConfig config;
        config.num_threads = threads;
        config.max_batch_tokens = batch;
        config.block_size = 4;  // several blocks per sequence
        auto eng = engine::Engine::create(std::move(model).value(), config, clock, logger);
        ASSERT_TRUE(eng.is_ok()) << eng.status().message();
        auto got = eng.value()->score(tokens);
        ASSERT_TRUE(got.is_ok()) << got.status().message();
        // Rows computed in a chunk of >= Matmul::kBlasMinTokens rows take the prefill path
        // (dequantized weights, f32 activations): tight. Smaller chunks take the decode path.
        const int64_t V = c.shape.n_vocab;
        const int64_t n_prefill_rows = batch >= kernels::Matmul::kBlasMinTokens ? batch : 0;
        const std::vector<float> got_prefill(got->begin(), got->begin() + n_prefill_rows * V);
        const std::vector<float> got_decode(got->begin() + n_prefill_rows * V, got->end());
        const std::vector<double> want_prefill(want.begin(), want.begin() + n_prefill_rows * V);
        const std::vector<double> want_decode(want.begin() + n_prefill_rows * V, want.end());
        EXPECT_LT(max_relative_error(got_prefill, want_prefill, V), 2e-4);
        EXPECT_LT(max_relative_error(got_decode, want_decode, V), quantized ? 3e-2 : 2e-4);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
