#include "core/status.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/rng.h"

namespace pagoda {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return Status::error("not positive: " + std::to_string(x));
  return x;
}

Status use(int x, int* out) {
  PAGODA_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = v * 2;
  return Status::ok();
}

TEST(Status, ValuesAndErrorsPropagate) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).is_ok());
  EXPECT_EQ(out, 6);
  Status s = use(-1, &out);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(), "not positive: -1");
  EXPECT_EQ(s.with_context("file.gguf").message(), "file.gguf: not positive: -1");
}

TEST(Status, CodesSurviveContextAndPropagation) {
  Status s = Status::too_large("prompt of 9000 tokens").with_context("request 7");
  EXPECT_EQ(s.code(), StatusCode::kTooLarge);
  EXPECT_EQ(s.message(), "request 7: prompt of 9000 tokens");
  Result<int> r = Status::unavailable("queue full");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Status::error("x").code(), StatusCode::kError);
  EXPECT_EQ(Status::error(StatusCode::kOk, "x").code(), StatusCode::kError);  // never ok
  EXPECT_EQ(Status::ok().code(), StatusCode::kOk);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  Result<int> r = Status::error("boom");
  EXPECT_DEATH((void)r.value(), "boom");
}

TEST(DType, Fp16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t half = static_cast<uint16_t>(h);
    float f = fp16_to_fp32(half);
    if (f != f) continue;  // NaN payloads need not round-trip
    EXPECT_EQ(fp32_to_fp16(f), half) << h;
  }
}

TEST(DType, Fp16RoundsToNearestEven) {
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(1.0f + 1.0f / 2048)), 1.0f);           // tie -> even
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even up
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(70000.0f)), INFINITY);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(1e-8f)), 0.0f);
  EXPECT_NEAR(fp16_to_fp32(fp32_to_fp16(3e-6f)), 3e-6f, 6e-8f);  // subnormal
}

TEST(DType, Bf16RoundTrip) {
  Rng rng(7);
  for (int i = 0; i < 10000; ++i) {
    float f = rng.normal() * 100.0f;
    float back = bf16_to_fp32(fp32_to_bf16(f));
    EXPECT_NEAR(back, f, std::abs(f) / 128.0f);
  }
}

TEST(DType, RowBytes) {
  EXPECT_EQ(dtype_row_bytes(DType::kF32, 64), 256u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_0, 64), 36u);
  EXPECT_EQ(dtype_from_name("q4_0"), DType::kQ4_0);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_K, 512), 288u);  // two 144-byte super-blocks
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_K, 256), 176u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(dtype_from_name("q5_k"), DType::kQ5_K);
  EXPECT_FALSE(dtype_from_name("q3_k").has_value());
}

}  // namespace
}  // namespace pagoda
