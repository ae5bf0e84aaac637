// KV element formats: FP8 conversions against an exhaustive nearest-even search, directed f16
// rounding, each format's dequant(quant(x)) error within the bound stated in kv_quant.h, the
// SIMD decoders bit-identical to the scalar ones (int4: within one rounding, the ISA files may
// fuse its multiply-add), and store_kv writing exactly the contract's
// bytes per block (kv_format.h) and nothing outside them.
#include "kernels/kv_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/kv_store.h"

namespace pagoda::kernels {
namespace {

bool is_nan_code(KvDType d, uint8_t c) {
  return d == KvDType::kFp8E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7c) == 0x7c && (c & 3) != 0;
}
float decode(KvDType d, uint8_t c) { return d == KvDType::kFp8E4M3 ? e4m3_to_fp32(c) : e5m2_to_fp32(c); }
uint8_t encode(KvDType d, float x) { return d == KvDType::kFp8E4M3 ? fp32_to_e4m3(x) : fp32_to_e5m2(x); }

// Nearest finite code by exhaustive search, ties to the even code (even mantissa); saturating.
uint8_t nearest_code(KvDType d, float x) {
  const float max = d == KvDType::kFp8E4M3 ? kE4M3Max : kE5M2Max;
  const double a = std::min<double>(std::fabs(x), max);
  int best = 0;
  double best_err = 1e300;
  for (int c = 0; c < 128; ++c) {
    if (is_nan_code(d, static_cast<uint8_t>(c)) || std::isinf(decode(d, static_cast<uint8_t>(c)))) continue;
    const double err = std::fabs(decode(d, static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8, ExhaustiveRoundTripAndNearestEven) {
  Rng rng(1);
  for (KvDType d : {KvDType::kFp8E4M3, KvDType::kFp8E5M2}) {
    SCOPED_TRACE(std::string(kv_dtype_name(d)));
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      if (is_nan_code(d, code)) {
        EXPECT_TRUE(std::isnan(decode(d, code)));
        continue;
      }
      EXPECT_EQ(encode(d, decode(d, code)), code) << c;
      // Midpoints to the next code up round to the even one of the two.
      const int next = c + 1;
      if ((c & 0x7f) < 0x7f && !is_nan_code(d, static_cast<uint8_t>(next)) && !std::isinf(decode(d, static_cast<uint8_t>(next))) &&
          !std::isinf(decode(d, code))) {
        const float mid = (decode(d, code) + decode(d, static_cast<uint8_t>(next))) / 2;
        EXPECT_EQ(encode(d, mid), (c % 2 == 0) ? code : static_cast<uint8_t>(next)) << c;
      }
    }
    for (int i = 0; i < 20000; ++i) {
      const float x = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.next_u64() % 40) - 24));
      ASSERT_EQ(encode(d, x), nearest_code(d, x)) << x;
    }
  }
  EXPECT_EQ(fp32_to_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(fp32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(fp32_to_e4m3(NAN), 0x7f);
  EXPECT_EQ(e4m3_to_fp32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_fp32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp32_to_e5m2(1e6f), 0x7b);
  EXPECT_EQ(e5m2_to_fp32(0x7b), 57344.0f);
  EXPECT_EQ(fp32_to_e5m2(INFINITY), 0x7c);
  EXPECT_TRUE(std::isnan(e5m2_to_fp32(fp32_to_e5m2(NAN))));
}

TEST(Fp16Directed, RoundsOutwardToAdjacentValues) {
  Rng rng(2);
  for (int i = 0; i < 100000; ++i) {
    const float x = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.next_u64() % 40) - 30));
    const float up = fp16_to_fp32(fp32_to_fp16_up(x)), down = fp16_to_fp32(fp32_to_fp16_down(x));
    ASSERT_GE(up, x);
    ASSERT_LE(down, x);
    const float nearest = fp16_to_fp32(fp32_to_fp16(x));
    ASSERT_TRUE(up == nearest || down == nearest) << x;
    if (up != down) {  // adjacent: nothing representable strictly between
      ASSERT_TRUE(nearest == up || nearest == down);
      ASSERT_LE(up - down, std::max(std::fabs(x) * 0x1p-10f, 0x1p-24f) * 1.0001f) << x;
    }
  }
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16_up(1e6f)), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16_down(-1e6f)), -65504.0f);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16_up(1e-30f)), 0x1p-24f);
}

// A random row: normal values of a random magnitude, sometimes an outlier or a constant row.
std::vector<float> random_row(Rng& rng, int64_t n) {
  std::vector<float> x(n);
  const double mag = std::ldexp(1.0, static_cast<int>(rng.next_u64() % 19) - 12);  // |x| well below 65504
  const double offset = (rng.next_u64() % 3 == 0) ? rng.normal() * mag * 4 : 0.0;
  for (auto& e : x) e = static_cast<float>(offset + rng.normal() * mag);
  if (rng.next_u64() % 4 == 0) x[rng.next_u64() % n] *= 20;
  if (rng.next_u64() % 16 == 0) std::fill(x.begin(), x.end(), x[0]);
  if (rng.next_u64() % 32 == 0) std::fill(x.begin(), x.end(), 0.0f);
  return x;
}

float amax_of(const std::vector<float>& x) {
  float a = 0;
  for (float e : x) a = std::max(a, std::fabs(e));
  return a;
}

double int4_bound(float lo, float hi) {
  return ((double(hi) - lo) * (1 + 0x1p-9) + std::fabs(lo) * 0x1p-9) / 30 + 0x1p-24;
}

constexpr double kSlack = 1 + 1e-5;

TEST(KvQuant, RowErrorsWithinStatedBounds) {
  Rng rng(3);
  const KvRowOps& dec = kv_row_ops(Isa::kScalar);
  for (int64_t n : {2, 8, 64, 128, 130}) {
    for (int trial = 0; trial < 400; ++trial) {
      const std::vector<float> x = random_row(rng, n);
      const float amax = amax_of(x);
      std::vector<float> y(n);
      std::vector<uint8_t> codes(n);
      uint16_t s16, m16;
      quantize_row_int8(x.data(), n, reinterpret_cast<int8_t*>(codes.data()), &s16);
      dec.int8(reinterpret_cast<const int8_t*>(codes.data()), fp16_to_fp32(s16), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(y[i] - x[i]), (amax / 254.0 * (1 + 0x1p-10) + 0x1p-25) * kSlack) << "int8 n " << n;
      }
      for (KvDType d : {KvDType::kFp8E4M3, KvDType::kFp8E5M2}) {
        quantize_row_fp8(d, x.data(), n, codes.data(), &s16);
        const float s = fp16_to_fp32(s16);
        (d == KvDType::kFp8E4M3 ? dec.e4m3 : dec.e5m2)(codes.data(), s, y.data(), n);
        const double rel = d == KvDType::kFp8E4M3 ? 0x1p-4 : 0x1p-3;
        const double abs = d == KvDType::kFp8E4M3 ? 0x1p-10 : 0x1p-17;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_LE(std::fabs(y[i] - x[i]), (rel * std::fabs(x[i]) + abs * s) * kSlack + 1e-37)
              << kv_dtype_name(d) << " x " << x[i] << " s " << s;
        }
      }
      quantize_row_int4(x.data(), n, codes.data(), &s16, &m16);
      dec.int4_row(codes.data(), fp16_to_fp32(s16), fp16_to_fp32(m16), y.data(), n);
      const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
      for (int64_t i = 0; i < n; ++i) ASSERT_LE(std::fabs(y[i] - x[i]), int4_bound(*lo, *hi) * kSlack) << "int4 n " << n;
    }
  }
}

TEST(KvQuant, Int4ChannelsWithinStatedBounds) {
  Rng rng(4);
  const KvRowOps& dec = kv_row_ops(Isa::kScalar);
  for (int64_t rows : {1, 5, 16, 32}) {
    for (int64_t n : {8, 64, 128}) {
      const int64_t x_stride = n + 6, code_stride = n / 2 + 3;
      std::vector<float> x(rows * x_stride);
      for (int64_t i = 0; i < n; ++i) {  // per-channel offsets and magnitudes (K's outlier channels)
        const std::vector<float> col = random_row(rng, rows + 1);
        for (int64_t r = 0; r < rows; ++r) x[r * x_stride + i] = col[r];
      }
      std::vector<uint8_t> codes(rows * code_stride);
      std::vector<uint16_t> scale(n), min(n);
      quantize_channels_int4(x.data(), rows, x_stride, n, codes.data(), code_stride, scale.data(), min.data());
      std::vector<float> sf(n), mf(n), y(n);
      for (int64_t i = 0; i < n; ++i) {
        sf[i] = fp16_to_fp32(scale[i]);
        mf[i] = fp16_to_fp32(min[i]);
      }
      for (int64_t r = 0; r < rows; ++r) {
        dec.int4_channels(codes.data() + r * code_stride, sf.data(), mf.data(), y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          float lo = x[i], hi = x[i];
          for (int64_t rr = 0; rr < rows; ++rr) {
            lo = std::min(lo, x[rr * x_stride + i]);
            hi = std::max(hi, x[rr * x_stride + i]);
          }
          ASSERT_LE(std::fabs(y[i] - x[r * x_stride + i]), int4_bound(lo, hi) * kSlack) << "row " << r << " ch " << i;
        }
      }
    }
  }
}

TEST(KvQuant, SimdDecodersMatchScalar) {
  Rng rng(5);
  const KvRowOps& ref = kv_row_ops(Isa::kScalar);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
    const KvRowOps& fast = kv_row_ops(isa);
    for (int64_t n : {2, 8, 16, 30, 64, 128, 130}) {
      std::vector<uint8_t> bytes(2 * n + 1), e4m3(n), e5m2(n);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng.next_u64());
      for (int64_t i = 0; i < n; ++i) bytes[1 + 2 * i + 1] &= 0xbf;  // f16 exponent < 31: no inf/NaN (payloads differ)
      for (auto& c : e4m3) {
        do c = static_cast<uint8_t>(rng.next_u64()); while (is_nan_code(KvDType::kFp8E4M3, c));
      }
      for (auto& c : e5m2) {
        do c = static_cast<uint8_t>(rng.next_u64()); while ((c & 0x7c) == 0x7c);
      }
      std::vector<float> scale(n), min(n), a(n), b(n);
      for (int64_t i = 0; i < n; ++i) {
        scale[i] = std::fabs(rng.normal());
        min[i] = rng.normal();
      }
      auto same = [&](const char* what) {
        ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << what << " " << isa_name(isa) << " n " << n;
      };
      // int4's scale * c + min may be fused into one FMA in the ISA files: one rounding apart.
      auto close = [&](const char* what) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(a[i], b[i], 0x1p-22f * (std::fabs(b[i]) + 16 * std::fabs(scale[i]) + std::fabs(min[i]) + 2))
              << what << " " << isa_name(isa) << " n " << n << " i " << i;
        }
      };
      // Odd byte offsets: codes and f16 rows may be unaligned inside a block.
      const auto* u16 = reinterpret_cast<const uint16_t*>(bytes.data() + 1);
      fast.f16(u16, a.data(), n), ref.f16(u16, b.data(), n), same("f16");
      fast.bf16(u16, a.data(), n), ref.bf16(u16, b.data(), n), same("bf16");
      const auto* i8 = reinterpret_cast<const int8_t*>(bytes.data() + 1);
      fast.int8(i8, 0.37f, a.data(), n), ref.int8(i8, 0.37f, b.data(), n), same("int8");
      fast.e4m3(e4m3.data(), 1.7f, a.data(), n), ref.e4m3(e4m3.data(), 1.7f, b.data(), n), same("e4m3");
      fast.e5m2(e5m2.data(), 0.3f, a.data(), n), ref.e5m2(e5m2.data(), 0.3f, b.data(), n), same("e5m2");
      fast.int4_row(bytes.data() + 1, 0.21f, -1.5f, a.data(), n), ref.int4_row(bytes.data() + 1, 0.21f, -1.5f, b.data(), n), close("int4 row");
      fast.int4_channels(bytes.data() + 1, scale.data(), min.data(), a.data(), n);
      ref.int4_channels(bytes.data() + 1, scale.data(), min.data(), b.data(), n);
      close("int4 channels");
    }
  }
}

// The f16 / bf16 row encoders of store_kv: bit for bit fp32_to_fp16 / fp32_to_bf16 on every
// ISA, over values that round to each side, ties, f16 subnormals and underflow, overflow to
// inf, infinities and NaNs (with payloads, which the scalar functions drop).
TEST(KvQuant, SimdEncodersMatchScalar) {
  Rng rng(8);
  const KvRowOps& ref = kv_row_ops(Isa::kScalar);
  std::vector<float> special = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 6.1e-5f, 6.0e-8f, 2.9e-8f,
                                3.0e-8f, -1e-9f, INFINITY, -INFINITY, std::nanf(""), -std::nanf("")};
  uint32_t bits[] = {0x7f800001u, 0xffc12345u, 0x3f808000u, 0x3f818000u, 0x33000000u, 0x33000001u};  // NaN payloads, bf16 ties, f16 half-ulp of the smallest subnormal
  for (uint32_t b : bits) {
    float f;
    std::memcpy(&f, &b, 4);
    special.push_back(f);
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
    const KvRowOps& fast = kv_row_ops(isa);
    for (int64_t n : {1, 8, 16, 30, 64, 130}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> x(n);
        for (auto& v : x) v = rng.normal() * std::ldexp(1.0f, static_cast<int>(rng.next_u64() % 60) - 40);
        if (trial % 2 == 1) {
          for (auto& v : x) v = special[rng.next_u64() % special.size()];
        }
        std::vector<uint16_t> a(n + 1, 0xBEEF), b(n + 1, 0xBEEF);
        for (bool f16 : {true, false}) {
          (f16 ? fast.enc_f16 : fast.enc_bf16)(x.data(), a.data(), n);
          (f16 ? ref.enc_f16 : ref.enc_bf16)(x.data(), b.data(), n);
          ASSERT_EQ(std::memcmp(a.data(), b.data(), (n + 1) * 2), 0) << (f16 ? "f16 " : "bf16 ") << isa_name(isa) << " n " << n;
        }
      }
    }
  }
}

TEST(KvQuant, SimdGroupKernelsMatchScalar) {
  Rng rng(7);
  const KvRowOps& ref = kv_row_ops(Isa::kScalar);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
    const KvRowOps& fast = kv_row_ops(isa);
    for (int64_t n : {1, 8, 20, 64, 128, 130}) {
      for (int64_t g = 1; g <= kKvMaxGroup; ++g) {
        std::vector<float> k(n), q(g * n), w(g), a(3 * g, -1), b(3 * g, -1), acc1(g * n), acc2;
        for (auto& x : k) x = rng.normal();
        for (auto& x : q) x = rng.normal();
        for (auto& x : w) x = rng.normal();
        for (auto& x : acc1) x = rng.normal();
        acc2 = acc1;
        fast.dot_group(k.data(), q.data(), g, n, 0.3f, a.data(), 3);
        ref.dot_group(k.data(), q.data(), g, n, 0.3f, b.data(), 3);
        for (int64_t j = 0; j < 3 * g; ++j) ASSERT_NEAR(a[j], b[j], 1e-5 * (1 + std::sqrt(double(n)))) << isa_name(isa) << " g " << g << " n " << n;
        fast.axpy_group(w.data(), k.data(), g, n, acc1.data());
        ref.axpy_group(w.data(), k.data(), g, n, acc2.data());
        for (int64_t j = 0; j < g * n; ++j) ASSERT_NEAR(acc1[j], acc2[j], 1e-6 * (1 + std::fabs(acc2[j]))) << isa_name(isa) << " g " << g;
      }
    }
  }
}

// store_kv writes the same bytes on every ISA (f16 / bf16 rows through the SIMD encoders), ND
// and NZ.
TEST(KvStore, EveryIsaWritesTheScalarBytes) {
  Rng rng(9);
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (KvLayoutKind layout : {KvLayoutKind::kND, KvLayoutKind::kNZ}) {
      const int64_t B = 16, nkv = 3, hd = 32, kv_dim = nkv * hd;
      std::vector<float> k(B * kv_dim), v(B * kv_dim);
      for (auto& x : k) x = rng.normal() * 3000.0f;
      for (auto& x : v) x = rng.normal() * 1e-6f;  // f16 subnormals
      std::vector<int64_t> slots(B);
      for (int64_t t = 0; t < B; ++t) slots[t] = (t % 2) * B + t / 2;  // two blocks, interleaved rows
      KvLayerBuffer want(d, layout, 2, B, nkv, hd);
      store_kv(want.view(), k.data(), v.data(), slots.data(), B, Isa::kScalar);
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
        KvLayerBuffer got(d, layout, 2, B, nkv, hd);
        store_kv(got.view(), k.data(), v.data(), slots.data(), B, isa);
        for (bool is_k : {true, false}) {
          const int64_t bytes = 2 * (is_k ? want.view().k_block_bytes() : want.view().v_block_bytes());
          ASSERT_EQ(std::memcmp(is_k ? got.view().k : got.view().v, is_k ? want.view().k : want.view().v, bytes), 0)
              << kv_dtype_name(d) << " " << kv_layout_name(layout) << " " << isa_name(isa) << (is_k ? " K" : " V");
        }
      }
    }
  }
}

// store_kv fills a block's bytes as the contract sizes them and touches nothing else; every
// stored row reads back within its format's bound.
TEST(KvStore, BlocksUseExactlyTheContractBytes) {
  Rng rng(6);
  const KvDType all[] = {KvDType::kF32,     KvDType::kF16, KvDType::kBF16, KvDType::kFp8E4M3,
                         KvDType::kFp8E5M2, KvDType::kInt8, KvDType::kInt4};
  for (KvDType d : all) {
    for (auto [B, nkv, hd] : {std::tuple<int64_t, int64_t, int64_t>{16, 2, 8}, {32, 3, 64}, {5, 1, 2}}) {
      SCOPED_TRACE(std::string(kv_dtype_name(d)) + " B " + std::to_string(B) + " hd " + std::to_string(hd));
      KvLayerBuffer buf(d, KvLayoutKind::kND, 3, B, nkv, hd);
      const KvLayerView& view = buf.view();
      ASSERT_EQ(view.k_block_bytes(), kv_block_bytes_k(d, hd, B, nkv));
      for (void* base : {view.k, view.v}) std::memset(base, 0xA5, 3 * (base == view.k ? view.k_block_bytes() : view.v_block_bytes()));
      const int64_t kv_dim = nkv * hd;
      std::vector<float> k(B * kv_dim), v(B * kv_dim);
      for (auto& x : k) x = rng.normal();
      for (auto& x : v) x = rng.normal();
      std::vector<int64_t> slots(B);
      for (int64_t t = 0; t < B; ++t) slots[t] = B + t;  // block 1, full
      store_kv(view, k.data(), v.data(), slots.data(), B);
      for (bool is_k : {true, false}) {
        const auto* p = static_cast<const uint8_t*>(is_k ? view.k : view.v);
        const int64_t bytes = is_k ? view.k_block_bytes() : view.v_block_bytes();
        for (int64_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(p[i], 0xA5) << "block 0 byte " << i;
          ASSERT_EQ(p[2 * bytes + i], 0xA5) << "block 2 byte " << i;
        }
        const std::vector<float>& src = is_k ? k : v;
        std::vector<float> row(hd);
        for (int64_t t = 0; t < B; ++t) {
          for (int64_t h = 0; h < nkv; ++h) {
            kv_load_row_reference(view, is_k, 1, t, h, false, row.data());
            for (int64_t i = 0; i < hd; ++i) {
              const float x = src[t * kv_dim + h * hd + i];
              ASSERT_LE(std::fabs(row[i] - x), 0.5 * std::max(1.0f, std::fabs(x))) << t << " " << h << " " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kernels
