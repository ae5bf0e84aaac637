#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/matmul.h"
#include "kernels/matmul_isa.h"

namespace pagoda::kernels {
namespace {

std::vector<float> random_normal(Rng& rng, int64_t n, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

std::vector<uint8_t> quantized(DType dtype, const std::vector<float>& x) {
  std::vector<uint8_t> out(dtype_row_bytes(dtype, static_cast<int64_t>(x.size())));
  quantize_row(dtype, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> dequantized(DType dtype, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(dtype, q.data(), out.data(), n);
  return out;
}

TEST(Quant, F32RoundTripIsExact) {
  Rng rng(1);
  auto x = random_normal(rng, 100);
  EXPECT_EQ(dequantized(DType::kF32, quantized(DType::kF32, x), 100), x);
}

TEST(Quant, HalfFormatsRoundTripEveryFiniteBitPattern) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> bits;
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint32_t exp_mask = dtype == DType::kF16 ? 0x7c00 : 0x7f80;
      if ((h & exp_mask) != exp_mask) bits.push_back(static_cast<uint16_t>(h));  // skip inf / NaN
    }
    const auto n = static_cast<int64_t>(bits.size());
    std::vector<float> f(bits.size());
    dequantize_row(dtype, bits.data(), f.data(), n);
    std::vector<uint16_t> back(bits.size());
    quantize_row(dtype, f.data(), back.data(), n);
    for (size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(back[i], bits[i]) << dtype_name(dtype) << " " << i;
  }
}

TEST(Quant, HalfFormatsRoundToNearest) {
  Rng rng(2);
  auto x = random_normal(rng, 4096);
  auto f16 = dequantized(DType::kF16, quantized(DType::kF16, x), 4096);
  auto bf16 = dequantized(DType::kBF16, quantized(DType::kBF16, x), 4096);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) > 1e-4f) {
      EXPECT_LE(std::fabs(f16[i] - x[i]), std::fabs(x[i]) * 0x1p-11f) << i;
    }
    EXPECT_LE(std::fabs(bf16[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << i;
  }
}

TEST(Quant, Q8_0KnownBlock) {
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(j - 16);  // amax 16 at j = 0
  auto q = quantized(DType::kQ8_0, x);
  BlockQ8_0 blk;
  std::memcpy(&blk, q.data(), sizeof(blk));
  EXPECT_EQ(blk.d, fp32_to_fp16(16.0f / 127.0f));
  EXPECT_EQ(blk.qs[0], -127);
  EXPECT_EQ(blk.qs[16], 0);
  EXPECT_EQ(blk.qs[17], 8);    // 127 / 16 = 7.94
  EXPECT_EQ(blk.qs[18], 16);   // 15.88
  EXPECT_EQ(blk.qs[31], 119);  // 119.06
  // d = 1 exactly: ties round away from zero (ggml uses roundf).
  std::vector<float> ties(kQK, 0.25f);
  ties[0] = 127.0f;
  ties[1] = 2.5f;
  ties[2] = -2.5f;
  ties[3] = 0.5f;
  ties[4] = -126.5f;
  auto qt = quantized(DType::kQ8_0, ties);
  std::memcpy(&blk, qt.data(), sizeof(blk));
  EXPECT_EQ(blk.d, 0x3c00);  // 1.0
  EXPECT_EQ(blk.qs[0], 127);
  EXPECT_EQ(blk.qs[1], 3);
  EXPECT_EQ(blk.qs[2], -3);
  EXPECT_EQ(blk.qs[3], 1);
  EXPECT_EQ(blk.qs[4], -127);
  EXPECT_EQ(blk.qs[5], 0);
}

TEST(Quant, Q4_0KnownBlock) {
  // x[j] = (j - 16) / 2: the largest magnitude is -8 (j = 0), so d = -8 / -8 = 1 and
  // q[j] = min(15, (int)(x[j] + 8.5)) = min(15, (j + 1) / 2).
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = 0.5f * static_cast<float>(j - 16);
  auto q = quantized(DType::kQ4_0, x);
  BlockQ4_0 blk;
  std::memcpy(&blk, q.data(), sizeof(blk));
  EXPECT_EQ(blk.d, 0x3c00);
  const uint8_t expected[16] = {0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4,
                                0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(blk.qs[j], expected[j]) << j;
  auto back = dequantized(DType::kQ4_0, q, kQK);
  EXPECT_EQ(back[0], -8.0f);
  EXPECT_EQ(back[3], -6.0f);
  EXPECT_EQ(back[31], 7.0f);  // 7.5 clamps to q = 15
  // A positive extreme: d = 4 / -8 = -0.5; 4 maps to q = 0 and -4 clamps to q = 15.
  std::vector<float> y(kQK, 1.0f);
  y[5] = 4.0f;
  y[6] = -4.0f;
  auto qy = quantized(DType::kQ4_0, y);
  std::memcpy(&blk, qy.data(), sizeof(blk));
  EXPECT_EQ(blk.d, fp32_to_fp16(-0.5f));
  auto back_y = dequantized(DType::kQ4_0, qy, kQK);
  EXPECT_EQ(back_y[5], 4.0f);
  EXPECT_EQ(back_y[6], -3.5f);
  EXPECT_EQ(back_y[0], 1.0f);  // 1 * -2 + 8.5 = 6.5 -> 6 -> -0.5 * (6 - 8)
}

TEST(Quant, BlockFormatsRoundTripWithinHalfAStep) {
  Rng rng(3);
  const int64_t n = 64 * kQK;
  auto x = random_normal(rng, n, 3.0f);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    auto q = quantized(dtype, x);
    auto back = dequantized(dtype, q, n);
    for (int64_t b = 0; b < n / kQK; ++b) {
      uint16_t d_bits;
      std::memcpy(&d_bits, q.data() + b * dtype_info(dtype).block_bytes, 2);
      const float d = std::fabs(fp16_to_fp32(d_bits));
      ASSERT_GT(d, 0.0f);
      for (int64_t i = b * kQK; i < (b + 1) * kQK; ++i) {
        const float err = std::fabs(back[i] - x[i]);
        // Q4_0 may clamp the value opposite the extreme by one step.
        const float bound = dtype == DType::kQ8_0 ? 0.57f * d : 1.01f * d;
        ASSERT_LE(err, bound) << dtype_name(dtype) << " block " << b << " value " << i;
      }
    }
  }
}

// The decode path's fast x quantizer must equal quantize_row(kQ8_0) bit for bit.
TEST(Quant, FastQ8_0QuantizerMatchesReferenceOnEveryIsa) {
  Rng rng(4);
  const int64_t n = 128 * kQK;
  auto x = random_normal(rng, n);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(j) - 15.5f;  // a block with exact ties...
  x[kQK] = 127.0f;                                                     // ...and one with d = 1
  for (int j = 1; j < kQK; ++j) x[kQK + j] = 0.5f * static_cast<float>(j - 16);
  auto ref = quantized(DType::kQ8_0, x);
  for (Isa isa : supported_isas()) {
    const auto& kernels = detail::matmul_kernels(isa);
    std::vector<int8_t> qs(static_cast<size_t>(n));
    std::vector<float> d(static_cast<size_t>(n / kQK * 3)), ds(d.size());
    kernels.quantize_x(x.data(), n, qs.data(), d.data(), ds.data(), 3);
    for (int64_t b = 0; b < n / kQK; ++b) {
      BlockQ8_0 blk;
      std::memcpy(&blk, ref.data() + b * sizeof(BlockQ8_0), sizeof(blk));
      ASSERT_EQ(d[b * 3], fp16_to_fp32(blk.d)) << isa_name(isa) << " block " << b;
      int sum = 0;
      for (int j = 0; j < kQK; ++j) {
        ASSERT_EQ(qs[b * kQK + j], blk.qs[j]) << isa_name(isa) << " block " << b << " value " << j;
        sum += blk.qs[j];
      }
      ASSERT_EQ(ds[b * 3], d[b * 3] * static_cast<float>(sum)) << isa_name(isa) << " block " << b;
    }
  }
}

TEST(Quant, FastDequantizeRowsMatchesReferenceOnEveryIsa) {
  Rng rng(5);
  const int64_t n_rows = 3;
  for (int64_t n_in : {int64_t{32}, int64_t{96}, int64_t{288}}) {
    auto x = random_normal(rng, n_rows * n_in);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      auto q = quantized(dtype, x);
      auto ref = dequantized(dtype, q, n_rows * n_in);
      WeightView w{q.data(), dtype, n_rows, n_in};
      for (Isa isa : supported_isas()) {
        std::vector<float> out(static_cast<size_t>((n_rows - 1) * n_in), -1.0f);
        detail::matmul_kernels(isa).dequantize_rows(w, 1, n_rows - 1, out.data());
        for (int64_t i = 0; i < (n_rows - 1) * n_in; ++i) {
          ASSERT_EQ(out[i], ref[n_in + i]) << isa_name(isa) << " " << dtype_name(dtype) << " " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kernels
