// The tiled AVX-512 paged attention (kernels/attention_tiled.h) on the shapes the engine runs:
// long decode steps (one row, so a single tile: split-K across threads with the final merge),
// long prefill chunks (many rows per tile, causal masks inside a chunk), GQA groups larger than
// a tile, head_dims of every template instance, every KV dtype, ND and NZ, block sizes 16 and
// 32, 1-4 threads -- each against paged_attention_reference (double) within float rounding,
// and the whole output against the scalar path. On a CPU without AVX-512 the same checks run
// the best ISA's kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/attention_tiled.h"

namespace pagoda::kernels {
namespace {

struct Case {
  int64_t n_head, n_kv_head, head_dim, block_size, cached, n_new;
};

struct TiledSetup {
  std::vector<float> q;
  std::vector<int32_t> positions, blocks;
  SeqSpan span;
};

// One sequence of cached + n_new tokens over a shuffled block table; its last n_new rows are queried.
TiledSetup make_setup(Rng& rng, const Case& c, const KvLayerView& layer, int64_t num_blocks) {
  TiledSetup s;
  const int64_t len = c.cached + c.n_new, kv_dim = c.n_kv_head * c.head_dim;
  const int64_t nb = (len + c.block_size - 1) / c.block_size;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  for (size_t i = ids.size() - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
  s.blocks.assign(ids.begin(), ids.begin() + nb);
  std::vector<float> k(len * kv_dim), v(len * kv_dim);
  for (auto& x : k) x = rng.normal();
  for (auto& x : v) x = rng.normal();
  std::vector<int64_t> slots(len);
  for (int64_t p = 0; p < len; ++p) slots[p] = int64_t{s.blocks[p / c.block_size]} * c.block_size + p % c.block_size;
  store_kv(layer, k.data(), v.data(), slots.data(), len);
  for (int64_t i = 0; i < c.n_new; ++i) s.positions.push_back(static_cast<int32_t>(c.cached + i));
  s.q.resize(c.n_new * c.n_head * c.head_dim);
  for (auto& x : s.q) x = 2.0f * rng.normal();  // sharper softmax than unit queries
  s.span = {0, c.n_new, s.blocks.data(), nb};
  return s;
}

std::vector<float> run(const KvLayerView& layer, const TiledSetup& s, const AttentionParams& params, int64_t hd, int threads,
                       Isa isa) {
  ThreadPool pool(threads);
  AttentionScratch scratch(threads, 1024, hd);
  std::vector<float> out(s.q.size(), -7.0f);
  paged_attention(layer, s.q.data(), s.positions.data(), &s.span, 1, params, out.data(), pool, scratch, isa);
  return out;
}

TEST(TiledAttention, MatchesReferenceForEveryFormatShapeAndThreadCount) {
  Rng rng(41);
  const Case cases[] = {
      {8, 1, 64, 16, 300, 1},    // decode, one tile: split-K over the threads
      {4, 4, 64, 16, 517, 1},    // decode, llama-110m-like heads
      {12, 12, 64, 16, 0, 70},   // prefill from empty: causal inside tiles of 16 rows
      {8, 2, 128, 32, 45, 37},   // continued prefill, GQA 4, head_dim 128
      {32, 1, 32, 16, 200, 3},   // a group of 32 heads: two tiles per row
      {4, 2, 80, 16, 90, 2},     // head_dim 80 (5 vectors)
      {2, 1, 256, 16, 130, 1},   // head_dim 256
      {32, 4, 64, 16, 300, 1},   // decode, GQA 8 (tinyllama's heads): two in-place tiles of 2 kv heads
      {20, 20, 32, 16, 100, 1},  // decode, MHA of 20 heads: in-place tiles of 16 and 4 kv heads
  };
  const KvDType dtypes[] = {KvDType::kF32,     KvDType::kF16,     KvDType::kBF16, KvDType::kFp8E4M3,
                            KvDType::kFp8E5M2, KvDType::kInt8,    KvDType::kInt4};
  for (const Case& c : cases) {
    for (KvDType dtype : dtypes) {
      for (KvLayoutKind layout : {KvLayoutKind::kND, KvLayoutKind::kNZ}) {
        if (layout == KvLayoutKind::kNZ && kv_dtype_is_quantized(dtype)) continue;
        SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " " + std::string(kv_layout_name(layout)) + " heads " +
                     std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) + " hd " + std::to_string(c.head_dim) +
                     " cached " + std::to_string(c.cached) + " new " + std::to_string(c.n_new));
        const int64_t num_blocks = (c.cached + c.n_new) / c.block_size + 4;
        KvLayerBuffer buf(dtype, layout, num_blocks, c.block_size, c.n_kv_head, c.head_dim);
        const TiledSetup s = make_setup(rng, c, buf.view(), num_blocks);
        const AttentionParams params{c.n_head, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        std::vector<float> ref(s.q.size());
        paged_attention_reference(buf.view(), s.q.data(), s.positions.data(), &s.span, 1, params, ref.data());
        const std::vector<float> scalar = run(buf.view(), s, params, c.head_dim, 1, Isa::kScalar);
        for (int threads : {1, 2, 4}) {
          const std::vector<float> got = run(buf.view(), s, params, c.head_dim, threads, detect_isa());
          for (size_t i = 0; i < ref.size(); ++i) {
            ASSERT_NEAR(got[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << threads << " threads, element " << i;
            ASSERT_NEAR(got[i], scalar[i], 4e-5 * (1 + std::fabs(ref[i]))) << threads << " threads, element " << i;
          }
        }
      }
    }
  }
}

TEST(TiledAttention, SupportsTheHeadDimsItHasKernelsFor) {
  for (int64_t hd : {16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256}) {
    KvLayerView v;
    v.head_dim = hd;
    EXPECT_TRUE(detail::tiled_attention_supports(v)) << hd;
  }
  for (int64_t hd : {8, 24, 72, 144, 176, 320}) {
    KvLayerView v;
    v.head_dim = hd;
    EXPECT_FALSE(detail::tiled_attention_supports(v)) << hd;
  }
}

}  // namespace
}  // namespace pagoda::kernels
