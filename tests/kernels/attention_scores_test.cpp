// The attention-score output of paged attention (AttentionScores, for H2O/SnapKV selection):
// the fast kernel's per-kv-head probability sums against paged_attention_reference, several
// sequences with prefill and decode rows, observed from a position on, f32 ND/NZ and int8;
// the reference's output with scores is its output. kv_copy_row moves a token's
// K and V byte for byte in every format it takes.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <numeric>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace pagoda::kernels {
namespace {

struct ScoreCase {
  KvDType dtype;
  KvLayoutKind layout;
  int64_t block_size;
};

class AttentionScoresTest : public ::testing::TestWithParam<ScoreCase> {};

TEST_P(AttentionScoresTest, FastMatchesReference) {
  const ScoreCase c = GetParam();
  Rng rng(7 + c.block_size);
  const int64_t n_head = 8, n_kv_head = 2, hd = 32, B = c.block_size;
  // Three sequences: 37 cached + 5 new (prefill chunk), 20 + 1 (decode), 9 + 3, not observed.
  const std::vector<int64_t> cached = {37, 20, 9}, n_new = {5, 1, 3};
  const std::vector<int32_t> observe = {39, 0, INT32_MAX};
  int64_t nb_total = 0;
  for (size_t s = 0; s < cached.size(); ++s) nb_total += (cached[s] + n_new[s] + B - 1) / B;
  KvLayerBuffer buf(c.dtype, c.layout, nb_total + 1, B, n_kv_head, hd);
  std::vector<int32_t> ids(nb_total);
  std::iota(ids.begin(), ids.end(), 1);
  for (size_t i = ids.size() - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
  std::vector<SeqSpan> seqs;
  std::vector<int32_t> positions;
  int64_t next_block = 0, rows = 0, stride = 0;
  for (size_t s = 0; s < cached.size(); ++s) {
    const int64_t len = cached[s] + n_new[s], nb = (len + B - 1) / B;
    std::vector<float> k(len * n_kv_head * hd), v(k.size());
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    std::vector<int64_t> slots(len);
    for (int64_t p = 0; p < len; ++p) slots[p] = int64_t{ids[next_block + p / B]} * B + p % B;
    store_kv(buf.view(), k.data(), v.data(), slots.data(), len);
    seqs.push_back(SeqSpan{rows, n_new[s], ids.data() + next_block, nb});
    for (int64_t i = 0; i < n_new[s]; ++i) positions.push_back(static_cast<int32_t>(cached[s] + i));
    next_block += nb;
    rows += n_new[s];
    stride = std::max(stride, len);
  }
  std::vector<float> q(rows * n_head * hd);
  for (auto& x : q) x = rng.normal();
  const AttentionParams params{n_head, 1.0f / std::sqrt(static_cast<float>(hd))};
  const int64_t n_seqs = static_cast<int64_t>(seqs.size());
  std::vector<float> fast_scores(n_seqs * n_kv_head * stride, 0.0f), ref_scores(fast_scores.size(), 0.0f);
  AttentionScores fs{fast_scores.data(), n_kv_head * stride, stride, observe.data()};
  AttentionScores rs{ref_scores.data(), n_kv_head * stride, stride, observe.data()};
  std::vector<float> out_fast(q.size()), out_ref(q.size()), out_plain(q.size());
  ThreadPool pool(2);
  AttentionScratch scratch(2, 64, hd);
  paged_attention_scores(buf.view(), q.data(), positions.data(), seqs.data(), n_seqs, params, fs, pool, scratch);
  paged_attention(buf.view(), q.data(), positions.data(), seqs.data(), n_seqs, params, out_plain.data(), pool, scratch);
  out_fast = out_plain;
  paged_attention_reference(buf.view(), q.data(), positions.data(), seqs.data(), n_seqs, params, out_ref.data(), &rs);
  for (size_t i = 0; i < out_fast.size(); ++i) {
    ASSERT_NEAR(out_fast[i], out_ref[i], 2e-4) << i;
    ASSERT_NEAR(out_plain[i], out_ref[i], 2e-4) << i;
  }
  double total = 0;
  for (size_t i = 0; i < fast_scores.size(); ++i) {
    ASSERT_NEAR(fast_scores[i], ref_scores[i], 2e-5) << i;
    total += fast_scores[i];
  }
  // Each observed row adds probability 1 per query head: seq 0 rows 39..41 (3), seq 1 (1).
  EXPECT_NEAR(total, (3 + 1) * n_head, 1e-3);
  for (int64_t p = 0; p < stride; ++p) EXPECT_EQ(fast_scores[2 * n_kv_head * stride + p], 0.0f) << "unobserved";
}

INSTANTIATE_TEST_SUITE_P(Formats, AttentionScoresTest,
                         ::testing::Values(ScoreCase{KvDType::kF32, KvLayoutKind::kND, 16},
                                           ScoreCase{KvDType::kF32, KvLayoutKind::kNZ, 16},
                                           ScoreCase{KvDType::kInt8, KvLayoutKind::kND, 8},
                                           ScoreCase{KvDType::kF16, KvLayoutKind::kND, 4}));

TEST(KvCopyRow, MovesEveryHeadByteForByte) {
  for (const ScoreCase c : {ScoreCase{KvDType::kF32, KvLayoutKind::kND, 16}, ScoreCase{KvDType::kF16, KvLayoutKind::kNZ, 16},
                            ScoreCase{KvDType::kInt8, KvLayoutKind::kND, 8}, ScoreCase{KvDType::kFp8E4M3, KvLayoutKind::kND, 8}}) {
    Rng rng(3);
    const int64_t n_kv_head = 2, hd = 16, B = c.block_size;
    KvLayerBuffer buf(c.dtype, c.layout, 3, B, n_kv_head, hd);
    std::vector<float> k(3 * B * n_kv_head * hd), v(k.size());
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    std::vector<int64_t> slots(3 * B);
    std::iota(slots.begin(), slots.end(), 0);
    store_kv(buf.view(), k.data(), v.data(), slots.data(), 3 * B);
    std::vector<float> before(hd), after(hd), other(hd);
    kv_load_row_reference(buf.view(), true, 0, 1, 0, false, other.data());  // a neighbour, untouched
    for (bool is_k : {true, false}) {
      for (int64_t h = 0; h < n_kv_head; ++h) {
        kv_load_row_reference(buf.view(), is_k, 2, 5, h, false, before.data());
        kv_copy_row(buf.view(), 2, 5, 0, 3);
        kv_load_row_reference(buf.view(), is_k, 0, 3, h, false, after.data());
        for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(before[i], after[i]) << kv_dtype_name(c.dtype);
      }
    }
    kv_load_row_reference(buf.view(), true, 0, 1, 0, false, after.data());
    EXPECT_EQ(other, after);
  }
}

}  // namespace
}  // namespace pagoda::kernels
