// MLA attention over a K-only latent cache: the kernel (every ISA of this CPU) equals its scalar
// reference for every KV dtype, block sizes, head counts and window masks; and with explicit
// random W_UK / W_UV, absorbed attention + up-projection equals ordinary attention over the
// decompressed keys [c W_UK | k_pe] and values c W_UV, in double (the naive form); the GEMM
// prefill paths, absorbed and expanded, equal the reference.
#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"

namespace pagoda::kernels {
namespace {

struct Case {
  int64_t r, dr, n_head, block_size;
  KvDType dtype;
  int64_t window = 0, sinks = 0;
};

struct Latents {
  std::vector<int64_t> cached = {29, 0, 12};  // per sequence, before this step
  std::vector<int64_t> n_new = {1, 11, 6};
  std::vector<std::vector<int32_t>> blocks;
  std::vector<std::vector<float>> rows;  // per sequence [len, r + dr]
  std::vector<SeqSpan> spans;
  std::vector<int32_t> positions;
  int64_t num_blocks = 0;
};

Latents make_latents_of(Rng& rng, int64_t width, int64_t B, std::vector<int64_t> cached, std::vector<int64_t> n_new);

Latents make_latents(Rng& rng, int64_t width, int64_t B) {
  const Latents shape;
  return make_latents_of(rng, width, B, shape.cached, shape.n_new);
}

// Sequences of cached[i] positions already stored and n_new[i] new rows each, in shuffled blocks.
Latents make_latents_of(Rng& rng, int64_t width, int64_t B, std::vector<int64_t> cached, std::vector<int64_t> n_new) {
  Latents s;
  s.cached = std::move(cached);
  s.n_new = std::move(n_new);
  int64_t total = 0;
  for (size_t i = 0; i < s.cached.size(); ++i) total += (s.cached[i] + s.n_new[i] + B - 1) / B;
  std::vector<int32_t> ids(total + 2);
  std::iota(ids.begin(), ids.end(), 0);
  for (size_t i = ids.size() - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
  s.num_blocks = static_cast<int64_t>(ids.size());
  size_t next = 0;
  s.blocks.resize(s.cached.size());
  for (size_t i = 0; i < s.cached.size(); ++i) {
    const int64_t len = s.cached[i] + s.n_new[i];
    for (int64_t b = 0; b < (len + B - 1) / B; ++b) s.blocks[i].push_back(ids[next++]);
    std::vector<float> rows(len * width);
    for (auto& x : rows) x = rng.normal();
    s.rows.push_back(rows);
  }
  for (size_t i = 0; i < s.cached.size(); ++i) {
    s.spans.push_back({static_cast<int64_t>(s.positions.size()), s.n_new[i], s.blocks[i].data(),
                       static_cast<int64_t>(s.blocks[i].size())});
    for (int64_t j = 0; j < s.n_new[i]; ++j) s.positions.push_back(static_cast<int32_t>(s.cached[i] + j));
  }
  return s;
}

void store_latents(const Latents& s, const KvLayerView& layer) {
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const int64_t len = s.cached[i] + s.n_new[i], B = layer.block_size;
    std::vector<int64_t> slots(len);
    for (int64_t p = 0; p < len; ++p) slots[p] = int64_t{s.blocks[i][p / B]} * B + p % B;
    store_kv(layer, s.rows[i].data(), nullptr, slots.data(), len);
  }
}

TEST(MlaAttention, KernelMatchesReferenceForEveryDtypeAndIsa) {
  const std::vector<Case> cases = {
      {32, 8, 4, 4, KvDType::kF32},      {64, 16, 16, 16, KvDType::kF16},  {16, 8, 3, 8, KvDType::kBF16},
      {32, 8, 5, 16, KvDType::kInt8},    {32, 16, 8, 4, KvDType::kFp8E4M3}, {64, 8, 9, 16, KvDType::kInt4},
      {32, 8, 4, 4, KvDType::kF32, 7, 4}, {32, 8, 12, 8, KvDType::kInt8, 9, 0},
  };
  Rng rng(17);
  for (const Case& c : cases) {
    SCOPED_TRACE("r " + std::to_string(c.r) + " dr " + std::to_string(c.dr) + " heads " + std::to_string(c.n_head) +
                 " B " + std::to_string(c.block_size) + " " + std::string(kv_dtype_name(c.dtype)) + " window " +
                 std::to_string(c.window));
    const int64_t L = c.r + c.dr;
    Latents s = make_latents(rng, L, c.block_size);
    KvLayerBuffer buf(c.dtype, KvLayoutKind::kND, s.num_blocks, c.block_size, 1, L, 8, /*k_only=*/true);
    EXPECT_EQ(buf.view().v_block_bytes(), 0);
    store_latents(s, buf.view());
    const int64_t rows = static_cast<int64_t>(s.positions.size());
    std::vector<float> q(rows * c.n_head * L);
    for (auto& x : q) x = rng.normal();
    const AttentionParams params{c.n_head, 1.0f / std::sqrt(static_cast<float>(L)), c.window, c.sinks};
    std::vector<float> want(rows * c.n_head * c.r);
    mla_attention_reference(buf.view(), q.data(), s.positions.data(), s.spans.data(), 3, params, c.r, want.data());
    for (Isa isa : supported_isas()) {
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        AttentionScratch scratch(threads, 64, L);
        std::vector<float> got(want.size(), -7.0f);
        mla_attention(buf.view(), q.data(), s.positions.data(), s.spans.data(), 3, params, c.r, got.data(), pool, scratch, isa);
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
        EXPECT_LT(worst, 2e-5) << "isa " << static_cast<int>(isa) << " threads " << threads;
      }
    }
  }
}

// A GEMM path (fn: one sequence's rows, absorbed) against the reference over sequences of
// `cached` positions and `n_new` rows each: several dtypes and layouts, every ISA, 1 and 3
// threads, chunks of 100 positions (rows starting mid-chunk) and the default.
using GemmPath = void (*)(const KvLayerView&, const float*, const int32_t*, const SeqSpan&, const AttentionParams&,
                          int64_t, float*, MlaGemmScratch&, ThreadPool&, Isa);
void expect_gemm_path_matches_reference(GemmPath fn, const std::vector<Case>& cases, uint64_t seed,
                                        std::vector<int64_t> cached, std::vector<int64_t> n_new, int64_t max_rows) {
  Rng rng(seed);
  for (const Case& c : cases) {
    for (KvLayoutKind layout : {KvLayoutKind::kND, KvLayoutKind::kNZ}) {
      if (layout == KvLayoutKind::kNZ && (c.dtype != KvDType::kF32 || c.block_size % 16 != 0)) continue;
      SCOPED_TRACE(std::string(kv_dtype_name(c.dtype)) + " B " + std::to_string(c.block_size) + " heads " +
                   std::to_string(c.n_head) + (layout == KvLayoutKind::kNZ ? " NZ" : " ND"));
      const int64_t L = c.r + c.dr;
      Latents s = make_latents_of(rng, L, c.block_size, cached, n_new);
      KvLayerBuffer buf(c.dtype, layout, s.num_blocks, c.block_size, 1, L, 8, /*k_only=*/true);
      store_latents(s, buf.view());
      const int64_t rows = static_cast<int64_t>(s.positions.size());
      std::vector<float> q(rows * c.n_head * L);
      for (auto& x : q) x = rng.normal() * 0.3f;
      const AttentionParams params{c.n_head, 1.0f / std::sqrt(static_cast<float>(L)), 0, 0};
      std::vector<float> want(rows * c.n_head * c.r);
      mla_attention_reference(buf.view(), q.data(), s.positions.data(), s.spans.data(), 3, params, c.r, want.data());
      for (Isa isa : supported_isas()) {
        for (int threads : {1, 3}) {
          for (int64_t chunk : {int64_t{100}, kMlaChunk}) {
            ThreadPool pool(threads);
            MlaGemmScratch scratch(threads, max_rows, c.n_head, L, chunk);
            std::vector<float> got(want.size(), -7.0f);
            for (const SeqSpan& span : s.spans) {
              fn(buf.view(), q.data(), s.positions.data(), span, params, c.r, got.data(), scratch, pool, isa);
            }
            double worst = 0;
            for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
            EXPECT_LT(worst, 5e-5) << "isa " << static_cast<int>(isa) << " threads " << threads << " chunk " << chunk;
          }
        }
      }
    }
  }
}

// The prefill GEMM path (chunks of positions, online softmax) equals the reference: chunks
// at the start of a sequence, after a cached prefix, across several tiles and blocks.
TEST(MlaAttention, GemmPrefillMatchesReference) {
  expect_gemm_path_matches_reference(
      &mla_attention_gemm,
      {{32, 16, 4, 16, KvDType::kF32}, {64, 16, 3, 16, KvDType::kF16}, {32, 8, 5, 8, KvDType::kInt8},
       {64, 8, 2, 16, KvDType::kInt4}, {48, 16, 4, 4, KvDType::kBF16}},
      23, {0, 300, 517}, {40, 260, 17}, 260);
}

// The expanded prefill (keys and values decompressed per chunk by explicit W_UK / W_UV) equals
// the absorbed reference followed by the up-projection, in double: chunks at the start of a
// sequence, after a cached prefix, across several chunks, tiles and blocks, for several dtypes
// and layouts, every ISA, 1 and 3 threads.
TEST(MlaAttention, ExpandedPrefillEqualsAbsorbedReferenceUpProjected) {
  struct ExpandedCase {
    int64_t r, dr, dn, dv, n_head, block_size;
    KvDType dtype;
  };
  const std::vector<ExpandedCase> cases = {
      {32, 16, 12, 20, 4, 16, KvDType::kF32}, {64, 16, 24, 16, 3, 16, KvDType::kF16},
      {32, 8, 8, 8, 5, 8, KvDType::kInt8},    {64, 8, 16, 32, 2, 16, KvDType::kInt4},
      {48, 16, 16, 16, 4, 4, KvDType::kBF16},
  };
  Rng rng(29);
  for (const ExpandedCase& c : cases) {
    for (KvLayoutKind layout : {KvLayoutKind::kND, KvLayoutKind::kNZ}) {
      if (layout == KvLayoutKind::kNZ && (c.dtype != KvDType::kF32 || c.block_size % 16 != 0)) continue;
      SCOPED_TRACE(std::string(kv_dtype_name(c.dtype)) + " B " + std::to_string(c.block_size) + " heads " +
                   std::to_string(c.n_head) + (layout == KvLayoutKind::kNZ ? " NZ" : " ND"));
      const int64_t L = c.r + c.dr, H = c.n_head, qh = c.dn + c.dr;
      Latents s = make_latents_of(rng, L, c.block_size, {0, 300, 517}, {40, 260, 17});
      KvLayerBuffer buf(c.dtype, layout, s.num_blocks, c.block_size, 1, L, 8, /*k_only=*/true);
      store_latents(s, buf.view());
      std::vector<float> wk_b(H * c.r * c.dn), wv_b(H * c.dv * c.r);  // [H, r, dn], [H, dv, r]
      for (auto& x : wk_b) x = rng.normal() / std::sqrt(static_cast<float>(c.r));
      for (auto& x : wv_b) x = rng.normal() / std::sqrt(static_cast<float>(c.r));
      const int64_t rows = static_cast<int64_t>(s.positions.size());
      std::vector<float> q(rows * H * qh);  // [q_nope | q_pe] per head
      for (auto& x : q) x = rng.normal() * 0.3f;
      // Absorbed in double: q_abs = [wk_b[h] q_nope | q_pe], the reference, then o = wv_b[h] o_lat.
      std::vector<float> q_abs(rows * H * L);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          const float* qt = q.data() + (t * H + h) * qh;
          for (int64_t j = 0; j < c.r; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < c.dn; ++i) acc += double(wk_b[(h * c.r + j) * c.dn + i]) * qt[i];
            q_abs[(t * H + h) * L + j] = static_cast<float>(acc);
          }
          for (int64_t i = 0; i < c.dr; ++i) q_abs[(t * H + h) * L + c.r + i] = qt[c.dn + i];
        }
      }
      const AttentionParams params{H, 1.0f / std::sqrt(static_cast<float>(qh)), 0, 0};
      std::vector<float> o_lat(rows * H * c.r);
      mla_attention_reference(buf.view(), q_abs.data(), s.positions.data(), s.spans.data(), 3, params, c.r, o_lat.data());
      std::vector<double> want(rows * H * c.dv);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t o = 0; o < c.dv; ++o) {
            double acc = 0;
            for (int64_t j = 0; j < c.r; ++j) acc += double(wv_b[(h * c.dv + o) * c.r + j]) * o_lat[(t * H + h) * c.r + j];
            want[(t * H + h) * c.dv + o] = acc;
          }
        }
      }
      const MlaUpProjection up{wk_b.data(), wv_b.data(), c.r, c.dn, c.dv};
      for (Isa isa : supported_isas()) {
        for (int threads : {1, 3}) {
          for (int64_t chunk : {int64_t{100}, kMlaChunk}) {
            ThreadPool pool(threads);
            MlaGemmScratch scratch(threads, 260, H, L, chunk);
            scratch.reserve_expanded(qh, c.dv);
            std::vector<float> got(want.size(), -7.0f);
            for (const SeqSpan& span : s.spans) {
              mla_attention_expanded(buf.view(), q.data(), s.positions.data(), span, params, up, got.data(), scratch, pool, isa);
            }
            double worst = 0;
            for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
            EXPECT_LT(worst, 5e-5) << "isa " << static_cast<int>(isa) << " threads " << threads << " chunk " << chunk;
          }
        }
      }
    }
  }
}

// Few rows over a long context with the heads as GEMM rows (decode steps, short chunks) equal
// the reference: several chunks, head counts above a work item's 64 rows.
TEST(MlaAttention, HeadsGemmForFewRowsMatchesReference) {
  expect_gemm_path_matches_reference(
      &mla_attention_heads_gemm,
      {{32, 16, 4, 16, KvDType::kF32}, {64, 16, 70, 16, KvDType::kF16}, {32, 8, 5, 8, KvDType::kInt8},
       {64, 8, 2, 16, KvDType::kInt4}, {48, 16, 16, 4, KvDType::kBF16}},
      31, {300, 517, 40}, {1, 3, 15}, 16);
}

// The choice of form counts multiply-adds: DeepSeek-V2's attention (r 512, rope 64, nope 128,
// values 128) prefills a fresh 512-token chunk expanded, and keeps 16 rows after a long prefix
// and a decode row absorbed.
TEST(MlaAttention, ExpandedFormIsChosenWhereItCostsLess) {
  const MlaUpProjection v2{nullptr, nullptr, 512, 128, 128};
  auto rows_from = [](int32_t first, int64_t n) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), first);
    return p;
  };
  EXPECT_TRUE(mla_expanded_pays(rows_from(0, 512).data(), 512, 576, v2));
  EXPECT_TRUE(mla_expanded_pays(rows_from(3584, 512).data(), 512, 576, v2));
  EXPECT_FALSE(mla_expanded_pays(rows_from(4000, 16).data(), 16, 576, v2));
  EXPECT_FALSE(mla_expanded_pays(rows_from(100, 1).data(), 1, 576, v2));
  EXPECT_FALSE(mla_expanded_pays(nullptr, 0, 576, v2));
}

// Absorbed (latent queries, latent values, then W_UV) == naive (decompressed K and V), f32 cache.
TEST(MlaAttention, AbsorbedEqualsDecompressedAttention) {
  Rng rng(5);
  const int64_t r = 24, dr = 8, dn = 12, dv = 10, H = 4, B = 4, L = r + dr;
  Latents s = make_latents(rng, L, B);
  KvLayerBuffer buf(KvDType::kF32, KvLayoutKind::kND, s.num_blocks, B, 1, L, 8, true);
  store_latents(s, buf.view());
  std::vector<double> wuk(H * dn * r), wuv(H * dv * r);  // [H, dn, r], [H, dv, r]
  for (auto& x : wuk) x = rng.normal() / std::sqrt(double(r));
  for (auto& x : wuv) x = rng.normal() / std::sqrt(double(r));
  const int64_t rows = static_cast<int64_t>(s.positions.size());
  std::vector<double> q_nope(rows * H * dn), q_pe(rows * H * dr);
  for (auto& x : q_nope) x = rng.normal();
  for (auto& x : q_pe) x = rng.normal();
  const double scale = 1.0 / std::sqrt(double(dn + dr));
  // Absorbed: q_abs = [W_UK^T q_nope | q_pe].
  std::vector<float> q_abs(rows * H * L);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < r; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < dn; ++i) acc += wuk[(h * dn + i) * r + j] * q_nope[(t * H + h) * dn + i];
        q_abs[(t * H + h) * L + j] = static_cast<float>(acc);
      }
      for (int64_t i = 0; i < dr; ++i) q_abs[(t * H + h) * L + r + i] = static_cast<float>(q_pe[(t * H + h) * dr + i]);
    }
  }
  ThreadPool pool(2);
  AttentionScratch scratch(2, 64, L);
  std::vector<float> o_lat(rows * H * r);
  mla_attention(buf.view(), q_abs.data(), s.positions.data(), s.spans.data(), 3, {H, static_cast<float>(scale)}, r,
                o_lat.data(), pool, scratch);
  for (size_t si = 0; si < s.rows.size(); ++si) {
    const std::vector<float>& lat = s.rows[si];
    for (int64_t t = s.spans[si].token_begin; t < s.spans[si].token_begin + s.spans[si].n_tokens; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        // Naive: k_p = [W_UK c_p | k_pe_p], v_p = W_UV c_p.
        const int64_t n_ctx = s.positions[t] + 1;
        std::vector<double> w(n_ctx), out(dv, 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t p = 0; p < n_ctx; ++p) {
          double d = 0;
          for (int64_t i = 0; i < dn; ++i) {
            double k = 0;
            for (int64_t j = 0; j < r; ++j) k += wuk[(h * dn + i) * r + j] * lat[p * L + j];
            d += q_nope[(t * H + h) * dn + i] * k;
          }
          for (int64_t i = 0; i < dr; ++i) d += q_pe[(t * H + h) * dr + i] * lat[p * L + r + i];
          w[p] = d * scale;
          mx = std::max(mx, w[p]);
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (int64_t p = 0; p < n_ctx; ++p) {
          for (int64_t o = 0; o < dv; ++o) {
            double v = 0;
            for (int64_t j = 0; j < r; ++j) v += wuv[(h * dv + o) * r + j] * lat[p * L + j];
            out[o] += w[p] / sum * v;
          }
        }
        for (int64_t o = 0; o < dv; ++o) {
          double got = 0;
          for (int64_t j = 0; j < r; ++j) got += wuv[(h * dv + o) * r + j] * o_lat[(t * H + h) * r + j];
          EXPECT_NEAR(got, out[o], 1e-4) << "row " << t << " head " << h << " channel " << o;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kernels
