// Sliding-window and sink masks of paged attention (AttentionParams::window, n_sinks): the
// fast kernel and paged_attention_reference against a dense, masked float64 attention over a
// contiguous cache, for several windows, sink counts, block sizes, lengths, f32/f16 (ND, NZ)
// and int8. Block-table entries of blocks no row attends to are holes (-1): the kernels must
// never read them (block_at aborts on a hole).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/rng.h"
#include "kernels/attention.h"

namespace pagoda::kernels {
namespace {

struct WindowCase {
  int64_t block_size, window, n_sinks, cached, n_new;
};

// One sequence of `cached + n_new` tokens; its last n_new rows are queried.
struct WindowSetup {
  int64_t B, n_head = 4, n_kv_head = 2, hd = 16, len = 0;
  std::vector<float> k, v, q;     // [len, kv_dim], [len, kv_dim], [n_new, n_head, hd]
  std::vector<int32_t> positions;  // [n_new]
  std::vector<int32_t> blocks;     // [ceil(len / B)], holes -1 for blocks nobody attends to
  int64_t num_blocks = 0;
  AttentionParams params;
};

WindowSetup make_setup(Rng& rng, const WindowCase& c, KvDType dtype, KvLayoutKind layout,
                 std::unique_ptr<KvLayerBuffer>& buf) {
  WindowSetup s;
  s.B = c.block_size;
  s.len = c.cached + c.n_new;
  s.params = {s.n_head, 1.0f / std::sqrt(static_cast<float>(s.hd)), c.window, c.n_sinks};
  const int64_t kv_dim = s.n_kv_head * s.hd, nb = (s.len + s.B - 1) / s.B;
  s.k.resize(s.len * kv_dim);
  s.v.resize(s.len * kv_dim);
  for (auto& x : s.k) x = rng.normal();
  for (auto& x : s.v) x = rng.normal();
  for (int64_t i = 0; i < c.n_new; ++i) s.positions.push_back(static_cast<int32_t>(c.cached + i));
  s.q.resize(c.n_new * s.n_head * s.hd);
  for (auto& x : s.q) x = rng.normal();
  s.num_blocks = nb + 2;
  std::vector<int32_t> ids(s.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  for (size_t i = ids.size() - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
  s.blocks.assign(ids.begin(), ids.begin() + nb);
  buf = std::make_unique<KvLayerBuffer>(dtype, layout, s.num_blocks, s.B, s.n_kv_head, s.hd);
  std::vector<int64_t> slots(s.len);
  for (int64_t p = 0; p < s.len; ++p) slots[p] = int64_t{s.blocks[p / s.B]} * s.B + p % s.B;
  store_kv(buf->view(), s.k.data(), s.v.data(), slots.data(), s.len);
  // Holes: blocks wholly after the sinks and before the first row's window.
  const AttendedRange first = attended_range(s.params, c.cached);
  for (int64_t j = 0; j < nb; ++j) {
    if (c.window > 0 && j * s.B >= c.n_sinks && (j + 1) * s.B <= first.window_begin) s.blocks[j] = -1;
  }
  return s;
}

// Dense masked attention in double over the original f32 K/V.
std::vector<double> dense_masked(const WindowSetup& s) {
  const int64_t kv_dim = s.n_kv_head * s.hd, group = s.n_head / s.n_kv_head;
  std::vector<double> out(s.q.size());
  for (size_t r = 0; r < s.positions.size(); ++r) {
    const int64_t pos = s.positions[r];
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> w(pos + 1, 0.0);
      std::vector<bool> on(pos + 1, false);
      double mx = -1e300, sum = 0;
      for (int64_t t = 0; t <= pos; ++t) {
        on[t] = s.params.window == 0 || t < s.params.n_sinks || pos - t < s.params.window;
        if (!on[t]) continue;
        double d = 0;
        for (int64_t i = 0; i < s.hd; ++i) d += double(s.q[(r * s.n_head + h) * s.hd + i]) * s.k[t * kv_dim + kvh * s.hd + i];
        w[t] = d * s.params.scale;
        mx = std::max(mx, w[t]);
      }
      for (int64_t t = 0; t <= pos; ++t) sum += on[t] ? (w[t] = std::exp(w[t] - mx)) : 0.0;
      for (int64_t i = 0; i < s.hd; ++i) {
        double acc = 0;
        for (int64_t t = 0; t <= pos; ++t) {
          if (on[t]) acc += w[t] / sum * s.v[t * kv_dim + kvh * s.hd + i];
        }
        out[(r * s.n_head + h) * s.hd + i] = acc;
      }
    }
  }
  return out;
}

TEST(PagedAttentionWindow, MaskedEqualsDenseMaskedReference) {
  const WindowCase cases[] = {
      {16, 0, 0, 40, 1},   {16, 8, 0, 70, 1},  {16, 20, 4, 90, 1}, {16, 16, 16, 100, 3}, {32, 40, 4, 150, 7},
      {16, 1, 0, 50, 1},   {32, 64, 0, 30, 5}, {16, 33, 3, 0, 60},  {32, 17, 1, 77, 20},  {16, 200, 4, 70, 2},
      {16, 100, 4, 300, 40}, {16, 150, 0, 0, 300},  // prefill chunks over several key blocks (AVX2 kernel: 128)
  };
  struct Format {
    KvDType dtype;
    KvLayoutKind layout;
    double tol;  // vs the dense reference over the original f32 values
  };
  const Format formats[] = {{KvDType::kF32, KvLayoutKind::kND, 1e-5},
                            {KvDType::kF32, KvLayoutKind::kNZ, 1e-5},
                            {KvDType::kF16, KvLayoutKind::kND, 2e-3},
                            {KvDType::kInt8, KvLayoutKind::kND, 0.05}};
  Rng rng(31);
  ThreadPool pool(3);
  AttentionScratch scratch(3, 512, 16);
  for (const Format& f : formats) {
    for (const WindowCase& c : cases) {
      SCOPED_TRACE(std::string(kv_dtype_name(f.dtype)) + " " + std::string(kv_layout_name(f.layout)) + " B " +
                   std::to_string(c.block_size) + " window " + std::to_string(c.window) + " sinks " +
                   std::to_string(c.n_sinks) + " cached " + std::to_string(c.cached) + " new " +
                   std::to_string(c.n_new));
      std::unique_ptr<KvLayerBuffer> buf;
      const WindowSetup s = make_setup(rng, c, f.dtype, f.layout, buf);
      if (c.window > 0 && c.cached > c.window + c.n_sinks + 2 * c.block_size) {
        EXPECT_NE(std::count(s.blocks.begin(), s.blocks.end(), -1), 0) << "the case should have holes";
      }
      const SeqSpan span{0, c.n_new, s.blocks.data(), static_cast<int64_t>(s.blocks.size())};
      const std::vector<double> want = dense_masked(s);
      std::vector<float> ref(want.size()), got(want.size());
      paged_attention_reference(buf->view(), s.q.data(), s.positions.data(), &span, 1, s.params, ref.data());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(ref[i], want[i], f.tol) << i;
      for (Isa isa : supported_isas()) {
        std::fill(got.begin(), got.end(), -7.0f);
        paged_attention(buf->view(), s.q.data(), s.positions.data(), &span, 1, s.params, got.data(), pool, scratch, isa);
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], ref[i], 2e-5) << isa_name(isa) << " " << i;
      }
    }
  }
}

TEST(PagedAttentionWindow, AttendedRange) {
  const AttentionParams p{1, 1.0f, 4, 2};
  EXPECT_EQ(attended_range(p, 2).window_begin, 0);  // positions 0..2, all in the window
  EXPECT_EQ(attended_range(p, 2).sink_end, 0);
  EXPECT_EQ(attended_range(p, 9).window_begin, 6);  // 6..9 plus sinks 0, 1
  EXPECT_EQ(attended_range(p, 9).sink_end, 2);
  EXPECT_EQ(attended_range(p, 4).sink_end, 1);      // window 1..4; sink 0 only
}

}  // namespace
}  // namespace pagoda::kernels
