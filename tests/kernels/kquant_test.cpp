#include "kernels/kquant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/matmul.h"
#include "kernels/matmul_isa.h"
#include "kernels/quant.h"

namespace pagoda::kernels {
namespace {

// ---- the formats, re-derived here from their definition (kquant.h's header comment) ----

// Packs 8 six-bit scales and mins the way the format defines (independently of the library).
void pack_scales(const int sc[8], const int m[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Value v of a Q4_K / Q5_K block from the definition: quant, then (d * sc) * q - dmin * m.
float q45_expected(float d, float dmin, const int sc[8], const int m[8], const uint8_t* qs, const uint8_t* qh, int v) {
  const int j = v / 32, chunk = v / 64, l = v % 32;
  int q = (v % 64) < 32 ? qs[32 * chunk + l] & 15 : qs[32 * chunk + l] >> 4;
  if (qh != nullptr) q += ((qh[l] >> j) & 1) * 16;
  return (d * static_cast<float>(sc[j])) * static_cast<float>(q) - dmin * static_cast<float>(m[j]);
}

constexpr int kSc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
constexpr int kM[8] = {0, 2, 4, 6, 20, 40, 5, 63};

TEST(KQuant, ScalesPackAsTheFormatSays) {
  uint8_t packed[12];
  pack_scales(kSc, kM, packed);
  // By hand: high 2 bits of sc[4..7] = 1, 2, 3, 3 on top of sc[0..3]; likewise for the mins.
  const uint8_t want[12] = {65, 130, 195, 196, 64, 130, 4, 198, 65, 129, 82, 255};
  EXPECT_EQ(std::memcmp(packed, want, 12), 0);
  uint8_t sc[8], m[8];
  unpack_kquant_scales(packed, sc, m);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(sc[j], kSc[j]) << j;
    EXPECT_EQ(m[j], kM[j]) << j;
  }
}

TEST(KQuant, DequantizeHandBuiltQ4K) {
  BlockQ4_K blk;
  blk.d = fp32_to_fp16(1.0f);
  blk.dmin = fp32_to_fp16(0.5f);
  pack_scales(kSc, kM, blk.scales);
  for (int i = 0; i < 128; ++i) blk.qs[i] = static_cast<uint8_t>(i * 37 + 11);
  blk.qs[104] = 0x5A;  // value 200: sub-block 6, low nibble 10
  blk.qs[127] = 0xF3;  // value 255: sub-block 7, high nibble 15
  blk.qs[1] = 0x70;    // value 33: sub-block 1, high nibble 7
  std::vector<float> out(256);
  dequantize_row(DType::kQ4_K, &blk, out.data(), 256);
  EXPECT_EQ(out[200], 50.0f * 10 - 0.5f * 5);   // 497.5
  EXPECT_EQ(out[255], 63.0f * 15 - 0.5f * 63);  // 913.5
  EXPECT_EQ(out[33], 2.0f * 7 - 0.5f * 2);      // 13
  for (int v = 0; v < 256; ++v) EXPECT_EQ(out[v], q45_expected(1.0f, 0.5f, kSc, kM, blk.qs, nullptr, v)) << v;
}

TEST(KQuant, DequantizeHandBuiltQ5K) {
  BlockQ5_K blk;
  blk.d = fp32_to_fp16(0.25f);
  blk.dmin = fp32_to_fp16(2.0f);
  pack_scales(kSc, kM, blk.scales);
  for (int i = 0; i < 128; ++i) blk.qs[i] = static_cast<uint8_t>(i * 53 + 7);
  for (int i = 0; i < 32; ++i) blk.qh[i] = static_cast<uint8_t>(i * 97 + 3);
  blk.qs[104] = 0x5A;
  blk.qh[8] = 1 << 6;  // value 200 (sub-block 6, l = 8): fifth bit set -> q = 26
  std::vector<float> out(256);
  dequantize_row(DType::kQ5_K, &blk, out.data(), 256);
  EXPECT_EQ(out[200], (0.25f * 50) * 26 - 2.0f * 5);  // 315
  EXPECT_EQ(out[8], (0.25f * 1) * 15 - 0.0f);         // value 8: sub-block 0, low nibble of qs[8] = 0xAF
  for (int v = 0; v < 256; ++v) EXPECT_EQ(out[v], q45_expected(0.25f, 2.0f, kSc, kM, blk.qs, blk.qh, v)) << v;
}

TEST(KQuant, DequantizeHandBuiltQ6K) {
  BlockQ6_K blk;
  blk.d = fp32_to_fp16(0.25f);
  for (int i = 0; i < 16; ++i) blk.scales[i] = static_cast<int8_t>(i % 2 == 0 ? -128 + 9 * i : 127 - 5 * i);
  for (int i = 0; i < 128; ++i) blk.ql[i] = static_cast<uint8_t>(i * 29 + 1);
  for (int i = 0; i < 64; ++i) blk.qh[i] = static_cast<uint8_t>(i * 71 + 5);
  blk.ql[0] = 0x3F;
  blk.qh[0] = 0b11100110;  // value 0: low nibble 15, bits 0-1 = 2 -> q = 47
  std::vector<float> out(256);
  dequantize_row(DType::kQ6_K, &blk, out.data(), 256);
  EXPECT_EQ(out[0], (0.25f * -128) * 15);  // -480
  EXPECT_EQ(out[64], (0.25f * static_cast<float>(blk.scales[4])) * ((3 | (2 << 4)) - 32));  // ql[0] >> 4, bits 4-5
  for (int v = 0; v < 256; ++v) {
    const int half = v / 128, g = (v % 128) / 32, l = v % 32;
    const uint8_t low = blk.ql[64 * half + l + (g % 2) * 32];
    const int q = (g < 2 ? low & 15 : low >> 4) | (((blk.qh[32 * half + l] >> (2 * g)) & 3) << 4);
    EXPECT_EQ(out[v], (0.25f * static_cast<float>(blk.scales[v / 16])) * static_cast<float>(q - 32)) << v;
  }
}

std::vector<float> normal_row(int64_t n, Rng& rng, float sigma = 1.0f) {
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = sigma * rng.normal();
  return x;
}

double rms(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

// quantize -> dequantize of gaussian rows: RMS error relative to sigma within the known
// accuracy of each format, and more bits strictly better.
TEST(KQuant, QuantizeDequantizeErrorBounds) {
  Rng rng(7);
  const int64_t n = 256 * 64;
  const auto x = normal_row(n, rng, 0.02f);
  double prev = 1.0;
  for (auto [dtype, bound] : {std::pair{DType::kQ4_K, 0.12}, {DType::kQ5_K, 0.06}, {DType::kQ6_K, 0.03}}) {
    std::vector<uint8_t> q(dtype_row_bytes(dtype, n));
    quantize_row(dtype, x.data(), q.data(), n);
    std::vector<float> back(static_cast<size_t>(n));
    dequantize_row(dtype, q.data(), back.data(), n);
    const double rel = rms(back, x) / 0.02;
    EXPECT_LT(rel, bound) << dtype_name(dtype);
    EXPECT_LT(rel, prev) << dtype_name(dtype);
    prev = rel;
    RecordProperty(std::string(dtype_name(dtype)) + "_relative_rms", std::to_string(rel));
  }
}

TEST(KQuant, QuantizeZeroAndConstantRows) {
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (float c : {0.0f, 0.75f, -3.0f}) {
      std::vector<float> x(512, c), back(512, 99.0f);
      std::vector<uint8_t> q(dtype_row_bytes(dtype, 512));
      quantize_row(dtype, x.data(), q.data(), 512);
      dequantize_row(dtype, q.data(), back.data(), 512);
      for (float v : back) ASSERT_NEAR(v, c, std::fabs(c) * 0.02 + 1e-6) << dtype_name(dtype) << " constant " << c;
    }
  }
}

TEST(KQuant, Q8KMatchesItsDefinition) {
  Rng rng(11);
  auto x = normal_row(512, rng);
  x[300] = -9.0f;  // the value of largest magnitude in block 1 maps to -127 (d = 1 / (-127 / -9))
  BlockQ8_K blk[2];
  quantize_row_q8_k(x.data(), blk, 512);
  EXPECT_FLOAT_EQ(blk[1].d, 9.0f / 127.0f);
  EXPECT_EQ(blk[1].qs[300 - 256], -127);
  for (int b = 0; b < 2; ++b) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk[b].qs[16 * g + i];
      EXPECT_EQ(blk[b].bsums[g], sum);
    }
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(blk[b].d * blk[b].qs[i], x[256 * b + i], std::fabs(blk[b].d) * 0.5001);
  }
  std::vector<float> zeros(256, 0.0f);
  quantize_row_q8_k(zeros.data(), blk, 256);
  EXPECT_EQ(blk[0].d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(blk[0].bsums[g], 0);
}

// The decode dot against a double dot of the dequantized weights with the dequantized Q8_K x.
TEST(KQuant, DotMatchesDequantizedProduct) {
  Rng rng(13);
  const int64_t n = 1024;
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int trial = 0; trial < 20; ++trial) {
      const auto w = normal_row(n, rng, 0.1f);
      const auto x = normal_row(n, rng);
      std::vector<uint8_t> wq(dtype_row_bytes(dtype, n));
      quantize_row(dtype, w.data(), wq.data(), n);
      std::vector<float> wd(static_cast<size_t>(n));
      dequantize_row(dtype, wq.data(), wd.data(), n);
      std::vector<BlockQ8_K> xq(n / kQK_K);
      quantize_row_q8_k(x.data(), xq.data(), n);
      double want = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double xi = static_cast<double>(xq[i / kQK_K].d) * xq[i / kQK_K].qs[i % kQK_K];
        want += static_cast<double>(wd[i]) * xi;
        scale += std::fabs(static_cast<double>(wd[i]) * xi);
      }
      EXPECT_NEAR(dot_kquant_q8k(dtype, wq.data(), xq.data(), n), want, 1e-5 * scale) << dtype_name(dtype);
    }
  }
}

// The prefill path's dequantizers (per ISA table) are bit-identical to dequantize_row.
TEST(KQuant, PrefillDequantizersAreBitExact) {
  Rng rng(17);
  const int64_t n_in = 768, n_out = 5;
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::vector<uint8_t> data(dtype_row_bytes(dtype, n_in) * n_out);
    for (int64_t o = 0; o < n_out; ++o) {
      const auto row = normal_row(n_in, rng, 0.3f);
      quantize_row(dtype, row.data(), data.data() + o * dtype_row_bytes(dtype, n_in), n_in);
    }
    const WeightView w{data.data(), dtype, n_out, n_in};
    std::vector<float> want(static_cast<size_t>(n_out * n_in));
    for (int64_t o = 0; o < n_out; ++o) dequantize_row(dtype, w.row(o), want.data() + o * n_in, n_in);
    for (Isa isa : supported_isas()) {
      std::vector<float> got(want.size(), -1.0f);
      detail::matmul_kernels(isa).dequantize_rows(w, 1, n_out - 1, got.data());
      for (size_t i = 0; i < static_cast<size_t>((n_out - 1) * n_in); ++i) {
        ASSERT_EQ(got[i], want[n_in + i]) << dtype_name(dtype) << " " << isa_name(isa) << " value " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kernels
