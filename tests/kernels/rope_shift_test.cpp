// rope_shift_k: rotating cached K rows by delta positions equals storing K computed directly at
// the shifted positions (RoPE rotations compose), in every format it supports, within one
// extra rounding of that format; V is never touched.
#include "kernels/rope_shift.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/rng.h"

namespace pagoda::kernels {
namespace {

struct Format {
  KvDType dtype;
  KvLayoutKind layout;
  double tol;  // max |shifted - direct| over a row, relative to the row's largest |value|
};

TEST(RopeShiftK, EqualsKeysStoredAtShiftedPositions) {
  // Two roundings (the original store and the re-store) against one: f16/bf16 a few ulps,
  // int8 1.5 steps of absmax/127, fp8 1.5 relative half-steps of its mantissa.
  const Format formats[] = {
      {KvDType::kF32, KvLayoutKind::kND, 1e-5},      {KvDType::kF32, KvLayoutKind::kNZ, 1e-5},
      {KvDType::kF16, KvLayoutKind::kND, 2e-3},      {KvDType::kF16, KvLayoutKind::kNZ, 2e-3},
      {KvDType::kBF16, KvLayoutKind::kND, 1.6e-2},   {KvDType::kBF16, KvLayoutKind::kNZ, 1.6e-2},
      {KvDType::kInt8, KvLayoutKind::kND, 1.5 / 127}, {KvDType::kFp8E4M3, KvLayoutKind::kND, 0.2},
      {KvDType::kFp8E5M2, KvLayoutKind::kND, 0.4},
  };
  const int64_t B = 16, nkv = 2, hd = 32, n = 3 * B;  // 3 blocks of one sequence
  Rng rng(77);
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeoxHalves}) {
    RopeParams rp;
    rp.style = style;
    rp.head_dim = hd;
    rp.rot_dim = style == RopeStyle::kNeoxHalves ? hd : hd - 8;  // partial rotation too
    for (const Format& f : formats) {
      for (int32_t delta : {-16, -48, 7}) {
        SCOPED_TRACE(std::string(kv_dtype_name(f.dtype)) + " " + std::string(kv_layout_name(f.layout)) + " delta " +
                     std::to_string(delta));
        std::vector<float> k_pre(n * nkv * hd), v(n * nkv * hd);
        for (auto& x : k_pre) x = rng.normal();
        for (auto& x : v) x = rng.normal();
        std::vector<int32_t> pos(n), shifted(n);
        for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(100 + i), shifted[i] = pos[i] + delta;
        std::vector<float> k_at_pos = k_pre, k_at_shifted = k_pre;
        rope(k_at_pos.data(), pos.data(), n, nkv, rp);
        rope(k_at_shifted.data(), shifted.data(), n, nkv, rp);
        const std::vector<int32_t> blocks = {4, 1, 2};  // shuffled; 0 and 3 unused
        std::vector<int64_t> slots(n);
        for (int64_t i = 0; i < n; ++i) slots[i] = int64_t{blocks[i / B]} * B + i % B;
        KvLayerBuffer a(f.dtype, f.layout, 5, B, nkv, hd), want(f.dtype, f.layout, 5, B, nkv, hd);
        store_kv(a.view(), k_at_pos.data(), v.data(), slots.data(), n);
        store_kv(want.view(), k_at_shifted.data(), v.data(), slots.data(), n);
        const int64_t v_bytes = 5 * a.view().v_block_bytes();
        const std::vector<uint8_t> v_before(static_cast<uint8_t*>(a.view().v), static_cast<uint8_t*>(a.view().v) + v_bytes);
        rope_shift_k(a.view(), blocks, delta, rp);
        EXPECT_EQ(std::memcmp(v_before.data(), a.view().v, v_bytes), 0) << "V changed";
        std::vector<float> got_row(hd), want_row(hd);
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t h = 0; h < nkv; ++h) {
            kv_load_row_reference(a.view(), true, blocks[i / B], i % B, h, false, got_row.data());
            kv_load_row_reference(want.view(), true, blocks[i / B], i % B, h, false, want_row.data());
            double scale = 1e-6, err = 0;
            for (int64_t c = 0; c < hd; ++c) {
              scale = std::max(scale, std::fabs(double(k_at_shifted[(i * nkv + h) * hd + c])));
              err = std::max(err, std::fabs(double(got_row[c]) - want_row[c]));
            }
            worst = std::max(worst, err / scale);
          }
        }
        EXPECT_LT(worst, f.tol);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kernels
