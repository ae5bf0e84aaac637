// Paged attention equals attention over a contiguous cache, for several block sizes,
// lengths that are not multiples of them, shuffled block tables, GQA/MQA, f32 and f16 KV,
// and every ISA of this CPU against the scalar reference.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

namespace pagoda::kernels {
namespace {

struct Seq {
  int64_t cached;     // tokens already in the cache before this step
  int64_t n_new;      // rows of this step
  std::vector<int32_t> blocks;
};

TEST(PagedAttention, EqualsContiguousAttention) {
  Rng rng(11);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (int64_t block_size : {1, 16, 32}) {
      for (auto [n_head, n_kv_head, head_dim] : {std::tuple<int64_t, int64_t, int64_t>{4, 4, 8}, {8, 2, 64}, {4, 1, 128}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " block " + std::to_string(block_size) + " heads " +
                     std::to_string(n_head) + "/" + std::to_string(n_kv_head) + " hd " + std::to_string(head_dim));
        const int64_t kv_dim = n_kv_head * head_dim;
        // Three sequences: a decode step, a prefill chunk, a continued prefill.
        std::vector<Seq> seqs = {{37, 1, {}}, {0, 19, {}}, {33, 5, {}}};
        int64_t total_blocks = 0;
        for (auto& s : seqs) total_blocks += (s.cached + s.n_new + block_size - 1) / block_size;
        std::vector<int32_t> ids(total_blocks + 3);
        std::iota(ids.begin(), ids.end(), 0);
        for (size_t i = ids.size() - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
        size_t next = 0;
        for (auto& s : seqs) {
          const int64_t nb = (s.cached + s.n_new + block_size - 1) / block_size;
          for (int64_t b = 0; b < nb; ++b) s.blocks.push_back(ids[next++]);
        }
        const int64_t num_blocks = static_cast<int64_t>(ids.size());
        const size_t elem = dtype == DType::kF32 ? 4 : 2;
        std::vector<uint8_t> k_mem(num_blocks * block_size * kv_dim * elem), v_mem(k_mem.size());
        KvLayerView layer{k_mem.data(), v_mem.data(), dtype, num_blocks, block_size, n_kv_head, head_dim};
        // Contiguous copies of every sequence's K/V (as stored, i.e. rounded for f16).
        std::vector<std::vector<float>> k_contig(seqs.size()), v_contig(seqs.size());
        std::vector<float> q;
        std::vector<int32_t> positions;
        std::vector<SeqSpan> spans;
        for (size_t si = 0; si < seqs.size(); ++si) {
          const Seq& s = seqs[si];
          const int64_t len = s.cached + s.n_new;
          std::vector<float> k(len * kv_dim), v(len * kv_dim);
          for (auto& x : k) x = rng.normal();
          for (auto& x : v) x = rng.normal();
          std::vector<int64_t> slots(len);
          for (int64_t p = 0; p < len; ++p) slots[p] = int64_t{s.blocks[p / block_size]} * block_size + p % block_size;
          store_kv(layer, k.data(), v.data(), slots.data(), len);
          if (dtype == DType::kF16) {
            for (auto& x : k) x = fp16_to_fp32(fp32_to_fp16(x));
            for (auto& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
          }
          k_contig[si] = k;
          v_contig[si] = v;
          spans.push_back({static_cast<int64_t>(positions.size()), s.n_new, seqs[si].blocks.data(),
                           static_cast<int64_t>(seqs[si].blocks.size())});
          for (int64_t i = 0; i < s.n_new; ++i) {
            positions.push_back(static_cast<int32_t>(s.cached + i));
            for (int64_t j = 0; j < n_head * head_dim; ++j) q.push_back(rng.normal());
          }
        }
        const int64_t n_rows = static_cast<int64_t>(positions.size());
        const AttentionParams params{n_head, 1.0f / std::sqrt(static_cast<float>(head_dim))};
        // Contiguous attention, computed here in double.
        std::vector<double> want(n_rows * n_head * head_dim);
        for (size_t si = 0; si < seqs.size(); ++si) {
          for (int64_t r = spans[si].token_begin; r < spans[si].token_begin + spans[si].n_tokens; ++r) {
            for (int64_t h = 0; h < n_head; ++h) {
              const int64_t kvh = h / (n_head / n_kv_head);
              std::vector<double> w(positions[r] + 1);
              double mx = -1e300, sum = 0;
              for (int64_t p = 0; p <= positions[r]; ++p) {
                double d = 0;
                for (int64_t i = 0; i < head_dim; ++i) d += double(q[(r * n_head + h) * head_dim + i]) * k_contig[si][p * kv_dim + kvh * head_dim + i];
                w[p] = d * params.scale;
                mx = std::max(mx, w[p]);
              }
              for (double& e : w) sum += (e = std::exp(e - mx));
              for (int64_t i = 0; i < head_dim; ++i) {
                double acc = 0;
                for (int64_t p = 0; p <= positions[r]; ++p) acc += w[p] / sum * v_contig[si][p * kv_dim + kvh * head_dim + i];
                want[(r * n_head + h) * head_dim + i] = acc;
              }
            }
          }
        }
        std::vector<float> ref(want.size());
        paged_attention_reference(layer, q.data(), positions.data(), spans.data(), 3, params, ref.data());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(ref[i], want[i], 1e-5) << i;
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
          for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            AttentionScratch scratch(threads, 128, head_dim);
            std::vector<float> got(want.size(), -1.0f);
            paged_attention(layer, q.data(), positions.data(), spans.data(), 3, params, got.data(), pool, scratch, isa);
            for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << isa_name(isa) << " " << i;
          }
        }
      }
    }
  }
}

TEST(VecOps, SimdMatchesScalar) {
  Rng rng(5);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
    const VecOps& fast = vec_ops(isa);
    const VecOps& ref = vec_ops(Isa::kScalar);
    for (int64_t n : {1, 7, 8, 16, 33, 64, 129}) {
      std::vector<float> a(n), b(n), y1(n), y2(n);
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; ++i) {
        a[i] = rng.normal();
        b[i] = rng.normal();
        h[i] = fp32_to_fp16(rng.normal());
        y1[i] = y2[i] = rng.normal();
      }
      EXPECT_NEAR(fast.dot_f32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n), 1e-4);
      EXPECT_NEAR(fast.dot_f16(h.data(), b.data(), n), ref.dot_f16(h.data(), b.data(), n), 1e-4);
      fast.axpy_f32(0.7f, a.data(), y1.data(), n);
      ref.axpy_f32(0.7f, a.data(), y2.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-6);
      fast.axpy_f16(-1.3f, h.data(), y1.data(), n);
      ref.axpy_f16(-1.3f, h.data(), y2.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-5);
    }
  }
}

TEST(Ops, RopeStylesRotatePairsAndKeepNorms) {
  Rng rng(3);
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeoxHalves}) {
    RopeParams p;
    p.style = style;
    p.head_dim = 16;
    p.rot_dim = 16;
    std::vector<float> x(2 * 16);
    for (auto& v : x) v = rng.normal();
    std::vector<float> orig = x;
    const int32_t pos[1] = {7};
    rope(x.data(), pos, 1, 2, p);
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 8; ++i) {
        const int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        const int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + 8;
        const double angle = 7.0 * std::pow(10000.0, -2.0 * i / 16);
        const float x0 = orig[h * 16 + a], x1 = orig[h * 16 + b];
        EXPECT_NEAR(x[h * 16 + a], x0 * std::cos(angle) - x1 * std::sin(angle), 1e-5);
        EXPECT_NEAR(x[h * 16 + b], x0 * std::sin(angle) + x1 * std::cos(angle), 1e-5);
      }
    }
  }
}

TEST(Ops, RmsnormSiluSoftmax) {
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 0.5f}, y(4);
  rmsnorm(x.data(), w.data(), y.data(), 1, 4, 0.0f);
  const float s = 1.0f / std::sqrt(30.0f / 4);
  EXPECT_NEAR(y[2], 3 * s * 2, 1e-6);
  std::vector<float> g = {0.0f, 1.0f}, u = {2.0f, 3.0f};
  silu_mul(g.data(), u.data(), 2);
  EXPECT_NEAR(g[0], 0.0f, 1e-7);
  EXPECT_NEAR(g[1], 3.0f / (1.0f + std::exp(-1.0f)), 1e-6);
  std::vector<float> p = {1000.0f, 1000.0f, -1e30f};
  softmax(p.data(), 3);
  EXPECT_NEAR(p[0], 0.5f, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
}

}  // namespace
}  // namespace pagoda::kernels
