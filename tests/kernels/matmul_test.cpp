#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/matmul_int8.h"
#include "kernels/quant.h"

namespace pagoda::kernels {
namespace {

constexpr DType kDTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                             DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr int64_t kMaxTokens = Matmul::kDecodeMaxTokens + 2;  // past every path
constexpr int64_t kMaxIn = 4096;
constexpr int64_t kMaxOut = 300;

// Random weights [n_out, n_in] stored in `dtype`, plus their dequantized values.
struct Weights {
  std::vector<uint8_t> data;
  std::vector<float> values;  // [n_out, n_in]
  WeightView view;
};

Weights random_weights(DType dtype, int64_t n_out, int64_t n_in, Rng& rng) {
  Weights w;
  w.data.resize(dtype_row_bytes(dtype, n_in) * n_out);
  w.values.resize(static_cast<size_t>(n_out * n_in));
  w.view = WeightView{w.data.data(), dtype, n_out, n_in};
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    for (auto& v : row) v = 0.5f * rng.normal();
    quantize_row(dtype, row.data(), w.data.data() + o * w.view.row_bytes(), n_in);
    dequantize_row(dtype, w.data.data() + o * w.view.row_bytes(), w.values.data() + o * n_in, n_in);
  }
  return w;
}

std::vector<float> random_x(int64_t n_tokens, int64_t n_in, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
  for (auto& v : x) v = rng.normal();
  return x;
}

// scale[t, o] = sum_i |W[o, i] x[t, i]|: errors of a float dot are bounded relative to it.
std::vector<double> abs_scale(const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t n_in = w.view.n_in, n_out = w.view.n_out;
  std::vector<double> s(static_cast<size_t>(n_tokens * n_out));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      double sum = 0.0;
      for (int64_t i = 0; i < n_in; ++i) sum += std::fabs(static_cast<double>(w.values[o * n_in + i]) * x[t * n_in + i]);
      s[t * n_out + o] = sum;
    }
  return s;
}

// Asserts |got - want| <= rel * scale elementwise; returns the worst ratio error / scale.
double expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& scale,
                    double rel, const std::string& what) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double ratio = std::fabs(static_cast<double>(got[i]) - want[i]) / scale[i];
    worst = std::max(worst, std::isnan(ratio) ? 1e30 : ratio);
    if (!(ratio <= rel)) {
      ADD_FAILURE() << what << " index " << i << ": " << got[i] << " vs " << want[i] << " (scale " << scale[i] << ")";
      return worst;
    }
  }
  return worst;
}

// A weight matrix, a batch and the expected product.
struct Case {
  Weights w;
  std::vector<float> x;       // [n_tokens, n_in]
  int64_t n_tokens = 0;
  std::vector<float> want;    // [n_tokens, n_out]
  std::vector<double> scale;  // [n_tokens, n_out]
};

using ReferenceFn = void (*)(const WeightView&, const float*, int64_t, float*);

// Row lengths for `dtype`: `n_ins`, or for the k-quants (256-value super-blocks) 1, 3 and 5
// super-blocks.
std::vector<int64_t> row_lengths(DType dtype, const std::vector<int64_t>& n_ins) {
  if (dtype_info(dtype).block_elems == 256) return {256, 768, 1280};
  return n_ins;
}

std::vector<Case> make_cases(DType dtype, const std::vector<int64_t>& n_ins, const std::vector<int64_t>& n_tokens_list,
                             ReferenceFn reference, Rng& rng) {
  std::vector<Case> cases;
  for (int64_t n_in : row_lengths(dtype, n_ins))
    for (int64_t n_out : {1, 5, 17, 300}) {
      for (int64_t n_tokens : n_tokens_list) {
        Case c;
        c.w = random_weights(dtype, n_out, n_in, rng);
        c.x = random_x(n_tokens, n_in, rng);
        c.n_tokens = n_tokens;
        c.want.resize(static_cast<size_t>(n_tokens * n_out));
        reference(c.w.view, c.x.data(), n_tokens, c.want.data());
        c.scale = abs_scale(c.w, c.x, n_tokens);
        cases.push_back(std::move(c));
      }
    }
  return cases;
}

// Runs every case through one Matmul per (ISA, thread count), each reused across all cases
// (so scratch left by a larger call is exercised), one pool alive at a time. The row split
// over threads is ISA-independent, so only the best ISA runs with 2 and 3 threads (3: more
// than a 2-core test machine has, and an uneven split); the others run on 1 thread.
// Which calls a test runs: those whose Matmul::path (for that ISA, weights and token count)
// is in `paths` (empty: all).
using Paths = std::vector<Matmul::Path>;
const Paths kExactPaths = {Matmul::Path::kDecode, Matmul::Path::kSgemm, Matmul::Path::kAmx};
const Paths kDecodeArithmetic = {Matmul::Path::kDecode, Matmul::Path::kInt8,
                                 Matmul::Path::kF32};  // matmul_decode_reference's

bool runs(const Paths& paths, const Matmul& m, const WeightView& w, int64_t n_tokens) {
  return paths.empty() || std::find(paths.begin(), paths.end(), m.path(w, n_tokens)) != paths.end();
}

const char* path_name(Matmul::Path path) {
  switch (path) {
    case Matmul::Path::kDecode: return "decode";
    case Matmul::Path::kSgemm: return "sgemm";
    case Matmul::Path::kAmx: return "amx";
    case Matmul::Path::kInt8: return "int8";
    case Matmul::Path::kBf16: return "bf16";
    case Matmul::Path::kF32: return "f32-gemm";
  }
  return "?";
}

double run_cases(DType dtype, const std::vector<Case>& cases, const Paths& paths = {},
                 int64_t max_tokens = kMaxTokens, bool batched_bf16 = false, bool int8_gemm = true,
                 bool f32_precision = false) {
  double worst = 0.0;
  std::set<std::string> exercised;  // "isa path" pairs that ran (the test says which paths it covered)
  for (Isa isa : supported_isas())
    for (int threads : {1, 2, 3}) {
      if (threads > 1 && isa != detect_isa()) continue;
      ThreadPool pool(threads);
      Matmul matmul(pool, max_tokens, kMaxIn, kMaxOut, isa);
      matmul.set_batched_bf16(batched_bf16);
      matmul.set_int8_gemm(int8_gemm);
      matmul.set_f32_precision(f32_precision);
      for (const Case& c : cases) {
        if (!runs(paths, matmul, c.w.view, c.n_tokens)) continue;
        exercised.insert(std::string(isa_name(isa)) + " " + path_name(matmul.path(c.w.view, c.n_tokens)));
        std::vector<float> y(c.want.size(), std::nanf(""));
        matmul.run(c.w.view, c.x.data(), c.n_tokens, y.data());
        std::ostringstream what;
        what << dtype_name(dtype) << " " << isa_name(isa) << " threads " << threads << " tokens " << c.n_tokens
             << " W [" << c.w.view.n_out << ", " << c.w.view.n_in << "]";
        worst = std::max(worst, expect_close(y, c.want, c.scale, 1e-5, what.str()));
        if (::testing::Test::HasFailure()) return worst;
      }
    }
  std::string list;
  for (const std::string& e : exercised) list += (list.empty() ? "" : ", ") + e;
  ::testing::Test::RecordProperty("paths_run", list);
  std::printf("[ paths    ] %s: %s\n", std::string(dtype_name(dtype)).c_str(), list.empty() ? "none on this CPU" : list.c_str());
  return worst;
}

void record_worst(double worst) {
  std::ostringstream text;
  text << std::scientific << worst;
  ::testing::Test::RecordProperty("worst_relative_error", text.str());
}

// A Matmul of the tests' sizes on `isa`, to ask which path weights of `dtype` take.
struct Probe {
  explicit Probe(DType dtype, Isa isa = detect_isa()) : matmul{pool, kMaxTokens, kMaxIn, kMaxOut, isa}, view{nullptr, dtype, 1, 256} {}
  ThreadPool pool{1};
  Matmul matmul;
  WeightView view;
};

class MatmulByDType : public ::testing::TestWithParam<DType> {};

// Decode path (one kernel pass of < kBlasMinTokens tokens) against the scalar reference of its arithmetic.
TEST_P(MatmulByDType, DecodeMatchesDecodeReference) {
  const DType dtype = GetParam();
  Rng rng(100 + static_cast<int>(dtype));
  std::vector<int64_t> n_ins = {32, 64, 96, 288, 4096};
  if (dtype_info(dtype).block_elems == 1) n_ins.push_back(37);  // tails of the float kernels
  record_worst(run_cases(dtype, make_cases(dtype, n_ins, {1, 2, 3, 4, 5, 6, 7}, matmul_decode_reference, rng)));
}

// Batched decode (non-F32 weights, kBlasMinTokens..kDecodeMaxTokens tokens: several groups of
// tokens over row tiles) against the same reference: every token as if decoded alone.
TEST_P(MatmulByDType, BatchedDecodeMatchesDecodeReference) {
  const DType dtype = GetParam();
  if (dtype == DType::kF32) {  // F32 weights need no dequantizing: sgemm from 8 rows on
    EXPECT_FALSE(Matmul::uses_decode_kernels(dtype, Matmul::kBlasMinTokens));
    EXPECT_TRUE(Matmul::uses_decode_kernels(dtype, Matmul::kBlasMinTokens - 1));
    return;
  }
  Rng rng(150 + static_cast<int>(dtype));
  const std::vector<int64_t> n_tokens = {Matmul::kBlasMinTokens, 15, 22, Matmul::kDecodeMaxTokens};
  for (int64_t t : n_tokens) ASSERT_TRUE(Matmul::uses_decode_kernels(dtype, t));
  record_worst(run_cases(dtype, make_cases(dtype, {64, 288, 4096}, n_tokens, matmul_decode_reference, rng),
                         kDecodeArithmetic));
}

// Batched decode steps of F16/BF16 weights keep f32 arithmetic (exact to float rounding
// whatever the batch) even where the bf16 GEMM runs prefill: the f32 GEMM from
// kF32MinTokens tokens where it runs (unless set_f32_gemm(false)), else the decode kernels.
TEST_P(MatmulByDType, BatchedDecodeOfHalfWeightsStaysF32) {
  const DType dtype = GetParam();
  if (dtype != DType::kF16 && dtype != DType::kBF16) return;
  for (Isa isa : supported_isas()) {
  SCOPED_TRACE(isa_name(isa));
  Probe p(dtype, isa);
  Matmul& probe = p.matmul;
  const WeightView& view = p.view;
  EXPECT_EQ(probe.uses_f32(view), isa >= Isa::kAvx2);
  for (int64_t t = 1; t <= Matmul::kDecodeMaxTokens; ++t) {
    const bool f32 = probe.uses_f32(view) && t >= Matmul::kF32MinTokens;
    EXPECT_EQ(probe.path(view, t), f32 ? Matmul::Path::kF32 : Matmul::Path::kDecode) << t;
  }
  const WeightView odd{nullptr, dtype, 1, 40};  // n_in not a multiple of 16: the decode kernels
  EXPECT_FALSE(probe.uses_f32(odd));
  EXPECT_EQ(probe.path(odd, Matmul::kDecodeMaxTokens), Matmul::Path::kDecode);
  const Matmul::Path prefill = probe.path(view, Matmul::kDecodeMaxTokens + 1);
  EXPECT_EQ(prefill, probe.uses_amx(view)    ? Matmul::Path::kAmx
                    : probe.uses_bf16(view) ? Matmul::Path::kBf16
                                            : Matmul::Path::kSgemm);
  probe.set_f32_gemm(false);
  EXPECT_FALSE(probe.uses_f32(view));
  for (int64_t t = 1; t <= Matmul::kDecodeMaxTokens; ++t) EXPECT_EQ(probe.path(view, t), Matmul::Path::kDecode) << t;
  }
}

// The f32 GEMM: a token's result does not depend on which or how many tokens share its call
// (kernels/matmul_f32.h), bit for bit: calls of 48 tokens, of 16..47 of them and of
// permutations give each token the same bits; and every ISA's GEMM gives the same bits.
TEST_P(MatmulByDType, BatchedF32DecodeIsBatchInvariant) {
  const DType dtype = GetParam();
  if (dtype != DType::kF16 && dtype != DType::kBF16) return;
  if (!Probe(dtype).matmul.uses_f32(Probe(dtype).view)) GTEST_SKIP() << "no AVX2 here: no f32 GEMM";
  Rng rng(330 + static_cast<int>(dtype));
  for (int64_t n_in : {64, 288, 4096}) {
    const int64_t n_out = 300, all = Matmul::kDecodeMaxTokens;
    const Weights w = random_weights(dtype, n_out, n_in, rng);
    const std::vector<float> x = random_x(all, n_in, rng);
    std::vector<float> y_first_isa;
    for (Isa isa : supported_isas())
    for (int threads : {1, 2, 3}) {
      if (isa == Isa::kScalar || (threads > 1 && isa != detect_isa())) continue;
      SCOPED_TRACE(isa_name(isa));
      ThreadPool pool(threads);
      Matmul matmul(pool, all, kMaxIn, kMaxOut, isa);
      ASSERT_EQ(matmul.path(w.view, all), Matmul::Path::kF32);
      std::vector<float> y_all(static_cast<size_t>(all * n_out));
      matmul.run(w.view, x.data(), all, y_all.data());
      if (y_first_isa.empty()) y_first_isa = y_all;
      ASSERT_EQ(0, std::memcmp(y_all.data(), y_first_isa.data(), y_all.size() * sizeof(float)));
      // Subsets: tokens [first, first + n) in reverse order.
      for (auto [first, n] : {std::pair<int64_t, int64_t>{0, 16}, {5, 17}, {30, 18}, {3, 33}, {1, 47}}) {
        ASSERT_EQ(matmul.path(w.view, n), Matmul::Path::kF32);
        std::vector<float> xs(static_cast<size_t>(n * n_in)), ys(static_cast<size_t>(n * n_out));
        for (int64_t i = 0; i < n; ++i) {
          std::copy_n(x.begin() + (first + n - 1 - i) * n_in, n_in, xs.begin() + i * n_in);
        }
        matmul.run(w.view, xs.data(), n, ys.data());
        for (int64_t i = 0; i < n; ++i) {
          const int64_t t = first + n - 1 - i;
          ASSERT_EQ(0, std::memcmp(ys.data() + i * n_out, y_all.data() + t * n_out, n_out * sizeof(float)))
              << "token " << t << " in a call of " << n << ", n_in " << n_in << ", threads " << threads;
        }
      }
    }
  }
}

// Matmul::set_batched_bf16 (EngineConfig::batched_bf16): batched decode calls of F16/BF16
// weights from kBf16MinTokens tokens on take the bf16 GEMM (where it runs), with
// matmul_bf16_reference's arithmetic; fewer tokens and other weights keep their paths.
TEST_P(MatmulByDType, BatchedBf16DecodeMatchesBf16Reference) {
  const DType dtype = GetParam();
  const Isa isa = std::min(detect_isa(), Isa::kAvx512);  // with AMX, prefill takes the tiles
  Probe p(dtype, isa), q(dtype, isa);
  q.matmul.set_batched_bf16(true);
  const bool half = dtype == DType::kF16 || dtype == DType::kBF16;
  for (int64_t t = 1; t <= Matmul::kDecodeMaxTokens + 1; ++t) {
    const bool bf16 = half && p.matmul.uses_bf16(p.view) && t >= Matmul::kBf16MinTokens;
    EXPECT_EQ(q.matmul.path(q.view, t), bf16 ? Matmul::Path::kBf16 : p.matmul.path(p.view, t)) << t;
  }
  if (!half) return;
  if (!p.matmul.uses_bf16(p.view)) GTEST_SKIP() << "this CPU has no AVX512-BF16: no bf16 GEMM here";
  Rng rng(290 + static_cast<int>(dtype));
  const std::vector<int64_t> n_tokens = {Matmul::kBf16MinTokens, 22, Matmul::kDecodeMaxTokens};
  for (int64_t t : n_tokens) ASSERT_TRUE(Matmul::uses_decode_kernels(dtype, t));
  record_worst(run_cases(dtype, make_cases(dtype, {32, 64, 288, 4096}, n_tokens, matmul_bf16_reference, rng),
                         {Matmul::Path::kBf16}, kMaxTokens, true));
}

// Prefill path (sgemm on dequantized weights, x unquantized; AMX tiles) against the double reference.
TEST_P(MatmulByDType, PrefillMatchesReference) {
  const DType dtype = GetParam();
  Rng rng(200 + static_cast<int>(dtype));
  std::vector<int64_t> n_tokens;
  for (int64_t t : {Matmul::kBlasMinTokens, int64_t{9}, Matmul::kDecodeMaxTokens + 1, kMaxTokens}) {
    if (!Matmul::uses_decode_kernels(dtype, t)) n_tokens.push_back(t);
  }
  ASSERT_FALSE(n_tokens.empty());
  // The int8 GEMM off: quantized weights take dequantize + sgemm on every ISA (what they take
  // where it does not run), so each ISA's dequantizer is held to the reference here.
  record_worst(run_cases(dtype, make_cases(dtype, {32, 64, 96, 288, 4096}, n_tokens, matmul_reference, rng),
                         kExactPaths, kMaxTokens, false, false));
}

// The int8 prefill GEMM (quantized weights on AVX2, and on AVX-512 VNNI without AMX) against
// the decode reference, whose arithmetic it is: 49, 64 and 97 tokens (tiles of 32 tokens,
// ragged, and a last tile of 16), row counts that are not multiples of the kernel's 4 or of a
// thread's chunk.
TEST_P(MatmulByDType, Int8PrefillMatchesDecodeReference) {
  const DType dtype = GetParam();
  const bool float_weights = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  bool any = false;
  for (Isa isa : supported_isas()) {
    Probe p(dtype, isa);
    const bool want = isa >= Isa::kAvx2 && !float_weights && !p.matmul.uses_amx(p.view);
    ASSERT_EQ(p.matmul.uses_int8(p.view), want) << isa_name(isa);
    if (want) {  // the batched steps that take it on this ISA (matmul.h: int8_min_tokens)
      const int64_t from = isa >= Isa::kAvx512 ? Matmul::kInt8MinTokens
                           : is_kquant(dtype)  ? Matmul::kInt8MinTokensAvx2KQuant
                                               : Matmul::kDecodeMaxTokens + 1;
      for (int64_t t = Matmul::kBlasMinTokens; t <= Matmul::kDecodeMaxTokens + 1; ++t) {
        EXPECT_EQ(p.matmul.path(p.view, t) == Matmul::Path::kInt8, t >= from) << isa_name(isa) << " " << t;
      }
      p.matmul.set_int8_gemm(false);
      EXPECT_FALSE(p.matmul.uses_int8(p.view));
      EXPECT_EQ(p.matmul.path(p.view, Matmul::kDecodeMaxTokens + 1), Matmul::Path::kSgemm);
    }
    any = any || want;
  }
  if (float_weights) return;  // never int8: checked above
  if (!any) GTEST_SKIP() << "this CPU runs no int8 GEMM (scalar only, or AMX takes prefill)";
  Rng rng(250 + static_cast<int>(dtype));
  const std::vector<int64_t> n_tokens = {Matmul::kDecodeMaxTokens + 1, 64, 97};
  for (int64_t t : n_tokens) ASSERT_FALSE(Matmul::uses_decode_kernels(dtype, t));
  record_worst(run_cases(dtype, make_cases(dtype, {32, 64, 288, 4096}, n_tokens, matmul_decode_reference, rng),
                         {Matmul::Path::kInt8}, 100));
}

// Weights whose every code sits at one of its dtype's two extremes (Q8_0 -128 / 127, Q4_0
// -8 / 7, Q4_K 0 / 15, Q5_K 0 / 31, Q6_K -32 / 31, every sub-block scale and min at its
// largest), against x of +-1 (every quant +-127): the int16 pair sums of the AVX2 kernels at
// their bounds (kernels/matmul_int8.h). Trial 0 aligns every product's sign (the largest
// sums), trial 1 opposes them, the rest are random. Each against the decode reference.
Weights extreme_weights(DType dtype, int64_t n_out, int64_t n_in, int trial, Rng& rng) {
  Weights w;
  w.data.resize(dtype_row_bytes(dtype, n_in) * n_out);
  w.values.resize(static_cast<size_t>(n_out * n_in));
  w.view = WeightView{w.data.data(), dtype, n_out, n_in};
  // Byte patterns of the two extremes (nibbles / bits all set or all clear).
  const auto code_byte = [&]() -> uint8_t {
    const bool high = trial == 0 ? true : trial == 1 ? false : rng.uniform(0.0f, 1.0f) < 0.5f;
    return high ? 0xFF : 0x00;
  };
  const uint16_t d16 = 0x1400;  // 2^-10 in f16
  const int64_t row_bytes = static_cast<int64_t>(w.view.row_bytes());
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = w.data.data() + o * row_bytes;
    for (int64_t i = 0; i < row_bytes; ++i) row[i] = code_byte();
    const int64_t blocks = n_in / dtype_info(dtype).block_elems;
    for (int64_t b = 0; b < blocks; ++b) {
      switch (dtype) {
        case DType::kQ8_0: {
          auto& blk = reinterpret_cast<BlockQ8_0*>(row)[b];
          blk.d = d16;
          for (auto& q : blk.qs) q = (q == -1) ? 127 : -128;  // 0xFF -> 127, 0x00 -> -128
          break;
        }
        case DType::kQ4_0:
          reinterpret_cast<BlockQ4_0*>(row)[b].d = d16;  // nibbles 15 / 0: codes 7 / -8
          break;
        case DType::kQ4_K:
        case DType::kQ5_K: {
          auto* base = row + b * dtype_info(dtype).block_bytes;
          uint16_t* dd = reinterpret_cast<uint16_t*>(base);
          dd[0] = d16, dd[1] = d16;                  // d, dmin
          std::memset(base + 4, 0xFF, 12);           // scales and mins 63
          break;
        }
        case DType::kQ6_K: {
          auto& blk = reinterpret_cast<BlockQ6_K*>(row)[b];
          for (auto& sc : blk.scales) sc = 127;
          blk.d = d16;
          break;
        }
        default:
          ADD_FAILURE() << dtype_name(dtype);
      }
    }
    dequantize_row(dtype, row, w.values.data() + o * n_in, n_in);
  }
  return w;
}

TEST_P(MatmulByDType, Int8GemmExactAtCodeExtremes) {
  const DType dtype = GetParam();
  if (!detail::int8_gemm_dtype(dtype)) return;
  Rng rng(260 + static_cast<int>(dtype));
  std::vector<Case> cases;
  const int64_t n_in = dtype_info(dtype).block_elems == 256 ? 1280 : 4096;
  for (int trial = 0; trial < 4; ++trial)
    for (int64_t n_tokens : {Matmul::kDecodeMaxTokens, int64_t{97}}) {
      Case c;
      c.w = extreme_weights(dtype, 37, n_in, trial, rng);
      c.x.resize(static_cast<size_t>(n_tokens * n_in));
      for (auto& v : c.x) v = trial < 2 ? 1.0f : (rng.uniform(0.0f, 1.0f) < 0.5f ? -1.0f : 1.0f);
      c.n_tokens = n_tokens;
      c.want.resize(static_cast<size_t>(n_tokens * 37));
      matmul_decode_reference(c.w.view, c.x.data(), n_tokens, c.want.data());
      c.scale = abs_scale(c.w, c.x, n_tokens);
      cases.push_back(std::move(c));
    }
  record_worst(run_cases(dtype, cases, kDecodeArithmetic, 100));
}

// The bf16 prefill GEMM (F16/BF16 weights on AVX-512 BF16 without AMX) against its
// reference: W and x rounded to bf16, summed in double.
TEST_P(MatmulByDType, Bf16PrefillMatchesBf16Reference) {
  const DType dtype = GetParam();
  {
    const Probe p(dtype, std::min(detect_isa(), Isa::kAvx512));  // with AMX, prefill takes the tiles
    const Matmul& probe = p.matmul;
    const WeightView& view = p.view;
    const bool half = dtype == DType::kF16 || dtype == DType::kBF16;
    if (!half) {
      EXPECT_FALSE(probe.uses_bf16(view));
      return;
    }
    if (!probe.uses_bf16(view)) GTEST_SKIP() << "this CPU has no AVX512-BF16: no bf16 prefill here";
  }
  Rng rng(270 + static_cast<int>(dtype));
  const std::vector<int64_t> n_tokens = {Matmul::kDecodeMaxTokens + 1, 64, 97};
  for (int64_t t : n_tokens) ASSERT_FALSE(Matmul::uses_decode_kernels(dtype, t));
  record_worst(run_cases(dtype, make_cases(dtype, {32, 64, 288, 4096}, n_tokens, matmul_bf16_reference, rng),
                         {Matmul::Path::kBf16}, 100));
}

// Matmul::set_f32_precision (`--matmul-precision f32`): F16/BF16 weights never take the bf16
// GEMM or AMX tiles on any ISA, even with set_batched_bf16, and every call of theirs matches the
// exact product to float rounding; quantized weights keep the paths they had.
TEST_P(MatmulByDType, F32PrecisionKeepsHalfWeightsInF32) {
  const DType dtype = GetParam();
  const bool half = Matmul::half_weights(dtype);
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    Probe plain(dtype, isa), exact(dtype, isa);
    exact.matmul.set_f32_precision(true);
    exact.matmul.set_batched_bf16(true);
    EXPECT_TRUE(exact.matmul.f32_precision());
    EXPECT_FALSE(exact.matmul.uses_bf16(exact.view));
    EXPECT_EQ(exact.matmul.uses_amx(exact.view), !half && plain.matmul.uses_amx(plain.view));
    for (int64_t t = 1; t <= kMaxTokens; ++t) {
      const Matmul::Path p = exact.matmul.path(exact.view, t);
      if (half) {
        EXPECT_NE(p, Matmul::Path::kBf16) << t;
        EXPECT_NE(p, Matmul::Path::kAmx) << t;
      } else {
        EXPECT_EQ(p, plain.matmul.path(plain.view, t)) << t;
      }
    }
  }
  if (!half) return;
  Rng rng(330 + static_cast<int>(dtype));
  const std::vector<int64_t> n_tokens = {1, Matmul::kF32MinTokens, Matmul::kDecodeMaxTokens + 1, kMaxTokens};
  record_worst(run_cases(dtype, make_cases(dtype, {32, 288, 4096}, n_tokens, matmul_reference, rng), {}, kMaxTokens,
                         true, true, true));
}

// The bf16 reference against the exact product: each bf16 rounding within 2^-8, so each
// product within 2^-7 (7.8e-3) of sum |w||x|.
TEST_P(MatmulByDType, Bf16ReferenceApproximatesExactProduct) {
  const DType dtype = GetParam();
  Rng rng(320 + static_cast<int>(dtype));
  Weights w = random_weights(dtype, 40, 1024, rng);
  auto x = random_x(3, 1024, rng);
  std::vector<float> want(3 * 40), got(3 * 40);
  matmul_reference(w.view, x.data(), 3, want.data());
  matmul_bf16_reference(w.view, x.data(), 3, got.data());
  const double worst = expect_close(got, want, abs_scale(w, x, 3), 7.9e-3, std::string(dtype_name(dtype)));
  record_worst(worst);
  if (dtype != DType::kBF16) {
    EXPECT_GT(worst, 0.0);  // x (and non-bf16 weights) really are rounded
  }
}

// The decode reference itself: exact float dots for float weights; for quantized weights
// only x's Q8_0 rounding (at most amax / 254 per value) separates it from the true product.
TEST_P(MatmulByDType, DecodeReferenceApproximatesExactProduct) {
  const DType dtype = GetParam();
  Rng rng(300 + static_cast<int>(dtype));
  Weights w = random_weights(dtype, 40, 1024, rng);
  auto x = random_x(3, 1024, rng);
  std::vector<float> want(3 * 40), got(3 * 40);
  matmul_reference(w.view, x.data(), 3, want.data());
  matmul_decode_reference(w.view, x.data(), 3, got.data());
  const bool quantized = dtype_info(dtype).block_elems > 1;
  expect_close(got, want, abs_scale(w, x, 3), quantized ? 1e-2 : 1e-5, std::string(dtype_name(dtype)));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, MatmulByDType, ::testing::ValuesIn(kDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

// The int8 path's Q8_K quantizer is quantize_row_q8_k's, byte for byte: random rows, an
// all-zero block, ties of magnitude with opposite signs (the first one sets the scale's
// sign), values exactly half-way between quants, and tiny and huge magnitudes.
TEST(Matmul, Int8Q8KQuantizerIsTheScalarOne) {
  if (detect_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 here";
  Rng rng(77);
  constexpr int64_t kBlocks = 8, n = kBlocks * kQK_K;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = (trial % 4 == 3 ? 1e-30f : trial % 4 == 2 ? 1e20f : 1.0f) * rng.normal();
    std::fill_n(x.begin() + kQK_K, kQK_K, 0.0f);  // block 1: all zero
    x[2 * kQK_K + 5] = 7.0f;                        // block 2: -7 and 7 tie, -7 first
    x[2 * kQK_K + 3] = -7.0f;
    for (int i = 0; i < kQK_K; ++i) {               // block 3: max 127, the rest on .5 steps
      x[3 * kQK_K + i] = i == 0 ? 127.0f : static_cast<float>(i % 50) - 24.5f;
    }
    std::vector<BlockQ8_K> want(kBlocks), got(kBlocks);
    quantize_row_q8_k(x.data(), want.data(), n);
    detail::int8_quantize_q8k(x.data(), got.data(), n);
    for (int64_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(BlockQ8_K)), 0) << "trial " << trial << " block " << b;
    }
  }
}

TEST(Matmul, ReferenceKnownValues) {
  // W = [[1, 2, ..., 32], [-1, -1, ..., -1]], x = [[1, 1, ...], [0.5, 0, 0.5, 0, ...]]
  std::vector<float> w(64), x(64);
  for (int i = 0; i < 32; ++i) {
    w[i] = static_cast<float>(i + 1);
    w[32 + i] = -1.0f;
    x[i] = 1.0f;
    x[32 + i] = i % 2 == 0 ? 0.5f : 0.0f;
  }
  WeightView view{w.data(), DType::kF32, 2, 32};
  std::vector<float> y(4);
  matmul_reference(view, x.data(), 2, y.data());
  EXPECT_EQ(y[0], 528.0f);  // 32 * 33 / 2
  EXPECT_EQ(y[1], -32.0f);
  EXPECT_EQ(y[2], 128.0f);  // 0.5 * (1 + 3 + ... + 31)
  EXPECT_EQ(y[3], -8.0f);
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    Matmul matmul(pool, 2, 32, 2, isa);
    std::vector<float> got(4);
    matmul.run(view, x.data(), 2, got.data());
    EXPECT_EQ(got, y) << isa_name(isa);
  }
}

TEST(Matmul, DetectIsaNamesAnIsa) {
  const Isa isa = detect_isa();
  EXPECT_STRNE(isa_name(isa), "unknown");
  EXPECT_STREQ(isa_name(Isa::kScalar), "scalar");
}

}  // namespace
}  // namespace pagoda::kernels
