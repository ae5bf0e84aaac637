// Paged attention equals attention over a contiguous cache, for several block sizes,
// lengths that are not multiples of them, shuffled block tables, GQA/MQA, every KV dtype and
// both layouts, and every ISA of this CPU against the scalar reference:
//   f32/f16/bf16: within 1e-5 of double attention over the values as stored;
//   quantized: within the stated per-format tolerance of double attention over the original
//   f32 values (kQuantTolerance), and within float rounding of paged_attention_reference;
//   NZ: bit-identical to ND.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <tuple>

#include "core/rng.h"
#include "kernels/ops.h"

namespace pagoda::kernels {
namespace {

constexpr KvDType kAllDTypes[] = {KvDType::kF32,     KvDType::kF16,     KvDType::kBF16, KvDType::kFp8E4M3,
                                  KvDType::kFp8E5M2, KvDType::kInt8,    KvDType::kInt4};

// Max |out - exact| over outputs for N(0,1) q, K, V (head_dim 8..128, GQA, blocks of 16 and
// 32): twice the largest error observed with these seeds (printed by the test below: f16
// 9.5e-4, bf16 0.0104, fp8-e4m3 0.106, fp8-e5m2 0.264, int8 0.0236, int4 0.204).
// Exact = double attention over the unquantized inputs.
double quant_tolerance(KvDType d) {
  switch (d) {
    case KvDType::kF32: return 1e-5;
    case KvDType::kF16: return 2e-3;
    case KvDType::kBF16: return 2e-2;
    case KvDType::kFp8E4M3: return 0.2;
    case KvDType::kFp8E5M2: return 0.5;
    case KvDType::kInt8: return 0.05;
    case KvDType::kInt4: return 0.4;
  }
  return 0;
}

struct Seq {
  int64_t cached;     // tokens already in the cache before this step
  int64_t n_new;      // rows of this step
  std::vector<int32_t> blocks;
};

// Three sequences (a decode step, a prefill chunk, a continued prefill) over a shuffled pool.
struct Scenario {
  Scenario(int64_t b, int64_t nh, int64_t nkv, int64_t hd) : block_size(b), n_head(nh), n_kv_head(nkv), head_dim(hd) {}
  int64_t block_size, n_head, n_kv_head, head_dim, num_blocks = 0;
  std::vector<Seq> seqs;
  std::vector<std::vector<float>> k, v;  // per sequence [len, n_kv_head * head_dim]
  std::vector<float> q;                  // [rows, n_head, head_dim]
  std::vector<int32_t> positions;        // [rows]
  std::vector<SeqSpan> spans;
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  int64_t rows() const { return static_cast<int64_t>(positions.size()); }
  AttentionParams params() const { return {n_head, 1.0f / std::sqrt(static_cast<float>(head_dim))}; }
};

Scenario make_scenario(Rng& rng, int64_t block_size, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                       std::vector<Seq> seqs = {{37, 1, {}}, {0, 19, {}}, {33, 5, {}}}) {
  Scenario sc(block_size, n_head, n_kv_head, head_dim);
  sc.seqs = std::move(seqs);
  int64_t total_blocks = 0;
  for (auto& s : sc.seqs) total_blocks += (s.cached + s.n_new + block_size - 1) / block_size;
  std::vector<int32_t> ids(total_blocks + 3);
  std::iota(ids.begin(), ids.end(), 0);
  for (size_t i = ids.size() - 1; i > 0; --i) std::swap(ids[i], ids[rng.next_u64() % (i + 1)]);
  size_t next = 0;
  for (auto& s : sc.seqs) {
    const int64_t nb = (s.cached + s.n_new + block_size - 1) / block_size;
    for (int64_t b = 0; b < nb; ++b) s.blocks.push_back(ids[next++]);
  }
  sc.num_blocks = static_cast<int64_t>(ids.size());
  for (const Seq& s : sc.seqs) {
    const int64_t len = s.cached + s.n_new;
    std::vector<float> k(len * sc.kv_dim()), v(len * sc.kv_dim());
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    sc.k.push_back(k);
    sc.v.push_back(v);
    sc.spans.push_back({sc.rows(), s.n_new, s.blocks.data(), static_cast<int64_t>(s.blocks.size())});
    for (int64_t i = 0; i < s.n_new; ++i) {
      sc.positions.push_back(static_cast<int32_t>(s.cached + i));
      for (int64_t j = 0; j < n_head * head_dim; ++j) sc.q.push_back(rng.normal());
    }
  }
  return sc;
}

// Stores every sequence's K/V through its block table, one store_kv call per sequence.
void store_all(const Scenario& sc, const KvLayerView& layer) {
  for (size_t si = 0; si < sc.seqs.size(); ++si) {
    const int64_t len = sc.seqs[si].cached + sc.seqs[si].n_new;
    std::vector<int64_t> slots(len);
    for (int64_t p = 0; p < len; ++p) {
      slots[p] = int64_t{sc.seqs[si].blocks[p / sc.block_size]} * sc.block_size + p % sc.block_size;
    }
    store_kv(layer, sc.k[si].data(), sc.v[si].data(), slots.data(), len);
  }
}

// Contiguous attention in double over per-sequence K/V arrays.
std::vector<double> contiguous_attention(const Scenario& sc, const std::vector<std::vector<float>>& k,
                                         const std::vector<std::vector<float>>& v) {
  const int64_t hd = sc.head_dim, kv_dim = sc.kv_dim();
  std::vector<double> want(sc.rows() * sc.n_head * hd);
  for (size_t si = 0; si < sc.seqs.size(); ++si) {
    for (int64_t r = sc.spans[si].token_begin; r < sc.spans[si].token_begin + sc.spans[si].n_tokens; ++r) {
      for (int64_t h = 0; h < sc.n_head; ++h) {
        const int64_t kvh = h / (sc.n_head / sc.n_kv_head);
        std::vector<double> w(sc.positions[r] + 1);
        double mx = -1e300, sum = 0;
        for (int64_t p = 0; p <= sc.positions[r]; ++p) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += double(sc.q[(r * sc.n_head + h) * hd + i]) * k[si][p * kv_dim + kvh * hd + i];
          w[p] = d * sc.params().scale;
          mx = std::max(mx, w[p]);
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int64_t p = 0; p <= sc.positions[r]; ++p) acc += w[p] / sum * v[si][p * kv_dim + kvh * hd + i];
          want[(r * sc.n_head + h) * hd + i] = acc;
        }
      }
    }
  }
  return want;
}

// The values as an unquantized dtype stores them.
std::vector<std::vector<float>> as_stored(KvDType dtype, std::vector<std::vector<float>> x) {
  for (auto& row : x) {
    for (auto& e : row) {
      if (dtype == KvDType::kF16) e = fp16_to_fp32(fp32_to_fp16(e));
      if (dtype == KvDType::kBF16) e = bf16_to_fp32(fp32_to_bf16(e));
    }
  }
  return x;
}

std::vector<Isa> isas_here() {
  std::vector<Isa> out;
  for (Isa isa : supported_isas()) out.push_back(isa);
  return out;
}

std::vector<float> run_fast(const Scenario& sc, const KvLayerView& layer, Isa isa, int threads, int64_t max_context = 128) {
  ThreadPool pool(threads);
  AttentionScratch scratch(threads, max_context, sc.head_dim);
  std::vector<float> got(sc.rows() * sc.n_head * sc.head_dim, -1.0f);
  paged_attention(layer, sc.q.data(), sc.positions.data(), sc.spans.data(), static_cast<int64_t>(sc.spans.size()),
                  sc.params(), got.data(), pool, scratch, isa);
  return got;
}

// Decode rows of groups up to 8 ({4, 4, 32}: 1 lane a kv head, {4, 2, 48}: 2, {8, 2, 64} and
// {4, 1, 128}: 4) read ND rows in place in the tiled kernel; {32, 2, 16} (16 lanes) and every NZ
// layer decode rows into scratch.
const std::tuple<int64_t, int64_t, int64_t> kHeadShapes[] = {{4, 4, 8},  {8, 2, 64},  {4, 1, 128},
                                                             {32, 2, 16}, {4, 4, 32}, {4, 2, 48}};

TEST(PagedAttention, UnquantizedEqualsContiguousAttention) {
  Rng rng(11);
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (KvLayoutKind layout : {KvLayoutKind::kND, KvLayoutKind::kNZ}) {
      for (int64_t block_size : {1, 16, 32}) {
        if (layout == KvLayoutKind::kNZ && block_size % 16 != 0) continue;
        for (auto [n_head, n_kv_head, head_dim] : kHeadShapes) {
          SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " " + std::string(kv_layout_name(layout)) + " block " +
                       std::to_string(block_size) + " heads " + std::to_string(n_head) + "/" +
                       std::to_string(n_kv_head) + " hd " + std::to_string(head_dim));
          Scenario sc = make_scenario(rng, block_size, n_head, n_kv_head, head_dim);
          KvLayerBuffer buf(dtype, layout, sc.num_blocks, block_size, n_kv_head, head_dim);
          store_all(sc, buf.view());
          const std::vector<double> want = contiguous_attention(sc, as_stored(dtype, sc.k), as_stored(dtype, sc.v));
          std::vector<float> ref(want.size());
          paged_attention_reference(buf.view(), sc.q.data(), sc.positions.data(), sc.spans.data(), 3, sc.params(), ref.data());
          for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(ref[i], want[i], 1e-5) << i;
          for (Isa isa : isas_here()) {
            for (int threads : {1, 3}) {
              const std::vector<float> got = run_fast(sc, buf.view(), isa, threads);
              for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << isa_name(isa) << " " << i;
            }
          }
        }
      }
    }
  }
}

// Prefill chunks whose contexts span several of the AVX2 prefill kernel's key blocks (128
// positions) and tiles (8 lanes), beside a decode row: a continued prefill at 290..319, a first
// chunk of 200 rows, one row at 400; GQA and MHA; blocks of 16 and of 5 (key blocks then start
// inside a block). Every ISA against exact attention over the values as stored.
TEST(PagedAttention, LongPrefillChunksEqualContiguousAttention) {
  Rng rng(13);
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16}) {
    for (int64_t block_size : {5, 16}) {
      for (auto [n_head, n_kv_head, head_dim] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 64}, {4, 4, 32}, {6, 1, 16}}) {
        SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " block " + std::to_string(block_size) + " heads " +
                     std::to_string(n_head) + "/" + std::to_string(n_kv_head) + " hd " + std::to_string(head_dim));
        Scenario sc = make_scenario(rng, block_size, n_head, n_kv_head, head_dim, {{290, 30, {}}, {400, 1, {}}, {0, 200, {}}});
        KvLayerBuffer buf(dtype, KvLayoutKind::kND, sc.num_blocks, block_size, n_kv_head, head_dim);
        store_all(sc, buf.view());
        const std::vector<double> want = contiguous_attention(sc, as_stored(dtype, sc.k), as_stored(dtype, sc.v));
        for (Isa isa : isas_here()) {
          for (int threads : {1, 3}) {
            const std::vector<float> got = run_fast(sc, buf.view(), isa, threads, 512);
            for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << isa_name(isa) << " " << i;
          }
        }
      }
    }
  }
}

TEST(PagedAttention, QuantizedWithinStatedBoundOfF32Attention) {
  Rng rng(12);
  for (KvDType dtype : kAllDTypes) {
    double worst = 0;
    for (int64_t block_size : {16, 32}) {
      for (auto [n_head, n_kv_head, head_dim] : kHeadShapes) {
        SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " block " + std::to_string(block_size) + " heads " +
                     std::to_string(n_head) + "/" + std::to_string(n_kv_head) + " hd " + std::to_string(head_dim));
        Scenario sc = make_scenario(rng, block_size, n_head, n_kv_head, head_dim);
        KvLayerBuffer buf(dtype, KvLayoutKind::kND, sc.num_blocks, block_size, n_kv_head, head_dim);
        store_all(sc, buf.view());
        const std::vector<double> exact = contiguous_attention(sc, sc.k, sc.v);
        std::vector<float> ref(exact.size());
        paged_attention_reference(buf.view(), sc.q.data(), sc.positions.data(), sc.spans.data(), 3, sc.params(), ref.data());
        for (size_t i = 0; i < exact.size(); ++i) {
          worst = std::max(worst, std::fabs(ref[i] - exact[i]));
          ASSERT_NEAR(ref[i], exact[i], quant_tolerance(dtype)) << i;
        }
        for (Isa isa : isas_here()) {
          for (int threads : {1, 3}) {
            const std::vector<float> got = run_fast(sc, buf.view(), isa, threads);
            for (size_t i = 0; i < exact.size(); ++i) {
              ASSERT_NEAR(got[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << isa_name(isa) << " " << i;
            }
          }
        }
      }
    }
    std::printf("[ info ] %-9s max |paged - exact f32 attention| = %.3g (tolerance %.3g)\n",
                std::string(kv_dtype_name(dtype)).c_str(), worst, quant_tolerance(dtype));
  }
}

TEST(PagedAttention, NzIsBitIdenticalToNd) {
  Rng rng(13);
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    const size_t elem = dtype == KvDType::kF32 ? 4 : 2;
    for (int64_t block_size : {16, 32}) {
      for (auto [n_head, n_kv_head, head_dim] : kHeadShapes) {
        SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " block " + std::to_string(block_size) + " hd " +
                     std::to_string(head_dim));
        Scenario sc = make_scenario(rng, block_size, n_head, n_kv_head, head_dim);
        KvLayerBuffer nd(dtype, KvLayoutKind::kND, sc.num_blocks, block_size, n_kv_head, head_dim);
        KvLayerBuffer nz(dtype, KvLayoutKind::kNZ, sc.num_blocks, block_size, n_kv_head, head_dim);
        store_all(sc, nd.view());
        store_all(sc, nz.view());
        // Block conversions agree with what store_kv wrote, both ways.
        const int64_t block_bytes = block_size * sc.kv_dim() * static_cast<int64_t>(elem);
        std::vector<uint8_t> tmp(block_bytes), back(block_bytes);
        for (int64_t b = 0; b < sc.num_blocks; ++b) {
          for (bool is_k : {true, false}) {
            const auto* nd_block = static_cast<const uint8_t*>(is_k ? nd.view().k : nd.view().v) + b * block_bytes;
            const auto* nz_block = static_cast<const uint8_t*>(is_k ? nz.view().k : nz.view().v) + b * block_bytes;
            kv_block_nd_to_nz(dtype, nd_block, tmp.data(), block_size, n_kv_head, head_dim);
            ASSERT_EQ(std::memcmp(tmp.data(), nz_block, block_bytes), 0) << "block " << b;
            kv_block_nz_to_nd(dtype, tmp.data(), back.data(), block_size, n_kv_head, head_dim);
            ASSERT_EQ(std::memcmp(back.data(), nd_block, block_bytes), 0) << "block " << b;
          }
        }
        for (Isa isa : isas_here()) {
          const std::vector<float> a = run_fast(sc, nd.view(), isa, 2);
          const std::vector<float> b = run_fast(sc, nz.view(), isa, 2);
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << isa_name(isa);
        }
      }
    }
  }
}

// Layer groups' pages interleave layers, so a layer's blocks lie a page apart
// (KvLayerView::block_stride): every dtype, both layouts and every ISA read the same bits as
// from dense arrays, and never the NaN-filled bytes between blocks.
TEST(PagedAttention, StridedBlocksAreBitIdenticalToDenseOnes) {
  Rng rng(17);
  for (KvDType dtype : kAllDTypes) {
    for (KvLayoutKind layout : {KvLayoutKind::kND, KvLayoutKind::kNZ}) {
      if (layout == KvLayoutKind::kNZ && kv_dtype_is_quantized(dtype)) continue;
      for (auto [n_head, n_kv_head, head_dim] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 64}, {4, 4, 32}}) {
        SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + (layout == KvLayoutKind::kNZ ? " nz" : " nd") + " hd " +
                     std::to_string(head_dim));
        Scenario sc = make_scenario(rng, 16, n_head, n_kv_head, head_dim);
        KvLayerBuffer dense(dtype, layout, sc.num_blocks, 16, n_kv_head, head_dim);
        const int64_t stride = 3 * std::max(dense.view().k_block_bytes(), dense.view().v_block_bytes()) + 64;
        KvLayerBuffer strided(dtype, layout, sc.num_blocks, 16, n_kv_head, head_dim, 8, false, stride);
        store_all(sc, dense.view());
        store_all(sc, strided.view());
        for (Isa isa : isas_here()) {
          const std::vector<float> a = run_fast(sc, dense.view(), isa, 2);
          const std::vector<float> b = run_fast(sc, strided.view(), isa, 2);
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << isa_name(isa);
          for (float x : b) ASSERT_TRUE(std::isfinite(x));
        }
      }
    }
  }
}

// More partial int4 blocks than stage slots: sequences decoding in turn steal each other's
// slot, so partial blocks are flushed and re-staged (with 1 slot: re-quantized on every store).
// Attention stays equal to the reference and within int4's tolerance of exact attention
// (observed: 0.184 with 1 or 2 slots, 0.187 with 3, where nothing is flushed).
TEST(PagedAttention, Int4StageOverflowDegradesGracefully) {
  Rng rng(14);
  const int64_t B = 16, n_head = 8, n_kv_head = 2, hd = 64, kv_dim = n_kv_head * hd;
  const std::vector<int64_t> lengths = {40, 23, 50};
  for (int64_t stage_slots : {1, 2, 3}) {
    std::vector<std::vector<int32_t>> tables(3);
    int32_t next = 0;
    for (size_t s = 0; s < 3; ++s) {
      for (int64_t b = 0; b < (lengths[s] + B - 1) / B; ++b) tables[s].push_back(next++);
    }
    KvLayerBuffer buf(KvDType::kInt4, KvLayoutKind::kND, next, B, n_kv_head, hd, stage_slots);
    std::vector<std::vector<float>> k(3), v(3);
    double worst = 0;
    for (int64_t step = 0; step < 50; ++step) {
      Scenario sc(B, n_head, n_kv_head, hd);
      for (size_t s = 0; s < 3; ++s) {
        if (step >= lengths[s]) continue;
        std::vector<float> kr(kv_dim), vr(kv_dim);
        for (auto& x : kr) x = rng.normal();
        for (auto& x : vr) x = rng.normal();
        const int64_t slot = int64_t{tables[s][step / B]} * B + step % B;
        store_kv(buf.view(), kr.data(), vr.data(), &slot, 1);
        k[s].insert(k[s].end(), kr.begin(), kr.end());
        v[s].insert(v[s].end(), vr.begin(), vr.end());
        sc.seqs.push_back({step, 1, tables[s]});
        sc.k.push_back(k[s]);
        sc.v.push_back(v[s]);
        sc.spans.push_back({sc.rows(), 1, tables[s].data(), static_cast<int64_t>(tables[s].size())});
        sc.positions.push_back(static_cast<int32_t>(step));
        for (int64_t j = 0; j < n_head * hd; ++j) sc.q.push_back(rng.normal());
      }
      const std::vector<double> exact = contiguous_attention(sc, sc.k, sc.v);
      std::vector<float> ref(exact.size());
      paged_attention_reference(buf.view(), sc.q.data(), sc.positions.data(), sc.spans.data(),
                                static_cast<int64_t>(sc.spans.size()), sc.params(), ref.data());
      const std::vector<float> got = run_fast(sc, buf.view(), detect_isa(), 2);
      for (size_t i = 0; i < exact.size(); ++i) {
        worst = std::max(worst, std::fabs(ref[i] - exact[i]));
        ASSERT_NEAR(ref[i], exact[i], quant_tolerance(KvDType::kInt4)) << "slots " << stage_slots << " step " << step;
        ASSERT_NEAR(got[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << "slots " << stage_slots << " step " << step;
      }
    }
    std::printf("[ info ] int4 with %lld stage slots for 3 decoding sequences: max error %.3g\n",
                static_cast<long long>(stage_slots), worst);
  }
}

// Copy-on-write of a partial int4 block carries its staged rows; the copies then diverge.
TEST(PagedAttention, Int4StageCopyOnWrite) {
  Rng rng(15);
  const int64_t B = 16, n_head = 4, n_kv_head = 2, hd = 32, kv_dim = n_kv_head * hd, len = 20;
  KvLayerBuffer buf(KvDType::kInt4, KvLayoutKind::kND, 4, B, n_kv_head, hd);
  const KvLayerView& view = buf.view();
  std::vector<float> k(len * kv_dim), v(len * kv_dim), q(n_head * hd);
  for (auto& x : k) x = rng.normal();
  for (auto& x : v) x = rng.normal();
  for (auto& x : q) x = rng.normal();
  std::vector<int64_t> slots(len);
  for (int64_t p = 0; p < len; ++p) slots[p] = (p < B ? 0 : 1) * B + p % B;
  store_kv(view, k.data(), v.data(), slots.data(), len);
  // What BlockPool::copy_block does for one layer, then the stage.
  for (auto [base, bytes] : {std::pair{view.k, view.k_block_bytes()}, std::pair{view.v, view.v_block_bytes()}}) {
    auto* p = static_cast<uint8_t*>(base);
    std::memcpy(p + 3 * bytes, p + 1 * bytes, bytes);
  }
  kv_stage_copy(view, 1, 3);
  const int32_t table_a[2] = {0, 1}, table_b[2] = {0, 3};
  const int32_t pos[2] = {len - 1, len - 1};
  std::vector<float> q2(q);
  q2.insert(q2.end(), q.begin(), q.end());
  const SeqSpan spans[2] = {{0, 1, table_a, 2}, {1, 1, table_b, 2}};
  ThreadPool pool(1);
  AttentionScratch scratch(1, 64, hd);
  std::vector<float> out(2 * n_head * hd);
  paged_attention(view, q2.data(), pos, spans, 2, {n_head, 0.2f}, out.data(), pool, scratch);
  EXPECT_EQ(std::memcmp(out.data(), out.data() + n_head * hd, n_head * hd * sizeof(float)), 0);
  // Diverge: a different row 20 for each; each sequence sees its own.
  std::vector<float> ka(kv_dim), kb(kv_dim);
  for (auto& x : ka) x = rng.normal();
  for (auto& x : kb) x = rng.normal();
  const int64_t slot_a = 1 * B + 4, slot_b = 3 * B + 4;
  store_kv(view, ka.data(), ka.data(), &slot_a, 1);
  store_kv(view, kb.data(), kb.data(), &slot_b, 1);
  std::vector<float> row(hd);
  kv_load_row_reference(view, true, 1, 4, 1, true, row.data());
  EXPECT_EQ(std::memcmp(row.data(), ka.data() + hd, hd * sizeof(float)), 0);
  kv_load_row_reference(view, true, 3, 4, 1, true, row.data());
  EXPECT_EQ(std::memcmp(row.data(), kb.data() + hd, hd * sizeof(float)), 0);
  kv_load_row_reference(view, true, 3, 3, 0, true, row.data());
  EXPECT_EQ(std::memcmp(row.data(), k.data() + (B + 3) * kv_dim, hd * sizeof(float)), 0);
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

// silu_mul's AVX2 and AVX-512 paths (a polynomial exp within 2 ulp of expf) against the scalar
// reference, over finite gates from -100 to 100 and ragged lengths.
TEST(Ops, SiluMulOfEveryIsaMatchesTheScalarOne) {
  if (detect_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 here: silu_mul is the scalar reference";
  Rng rng(21);
  for (Isa isa : supported_isas())
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 100, 1024}) {
    if (isa == Isa::kScalar) continue;
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> g(n), u(n);
    for (int64_t i = 0; i < n; ++i) {
      g[i] = i % 7 == 0 ? rng.uniform(-100.0f, 100.0f) : 4.0f * rng.normal();
      u[i] = rng.normal();
    }
    std::vector<float> want = g, got = g;
    silu_mul(want.data(), u.data(), n, Isa::kScalar);
    silu_mul(got.data(), u.data(), n, isa);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], 4e-7f * std::fabs(g[i] * u[i]) + 1e-30f) << "n " << n << " g " << g[i];
    }
  }
}

// exp_shifted_sum and max_of (the online softmax of the MLA GEMM paths): every ISA's values
// within 2 ulp-ish of the scalar reference's std::exp, sums within float rounding of a double
// sum, maxima exact; ragged lengths, shifts above and below the row.
TEST(Ops, ExpShiftedSumAndMaxOfEveryIsaMatchTheScalarOnes) {
  Rng rng(24);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 100, 2048}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = i % 5 == 0 ? rng.uniform(-60.0f, 8.0f) : 3.0f * rng.normal();
    for (float shift : {8.0f, 0.5f, -2.0f}) {
      std::vector<float> want = x;
      const float want_sum = exp_shifted_sum(want.data(), n, shift, Isa::kScalar);
      double exact = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double e = std::exp(double(x[i] - shift));  // of the float difference, as computed
        ASSERT_NEAR(want[i], e, 2e-7 * e);
        exact += e;
      }
      const double sum_tolerance = 6e-8 * double(n + 1) * exact + 1e-30;  // float sums of n terms
      ASSERT_NEAR(want_sum, exact, sum_tolerance);
      for (Isa isa : supported_isas()) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n));
        std::vector<float> got = x;
        const float got_sum = exp_shifted_sum(got.data(), n, shift, isa);
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 4e-7f * want[i] + 1e-30f) << "x " << x[i];
        EXPECT_NEAR(got_sum, exact, sum_tolerance);
        const float init = n > 3 ? x[3] - 1.0f : -INFINITY;
        float want_max = init;
        for (float v : x) want_max = std::max(want_max, v);
        EXPECT_EQ(max_of(x.data(), n, init, isa), want_max);
        EXPECT_EQ(max_of(x.data(), n, 1e9f, isa), 1e9f);
      }
    }
  }
}

// gelu_mul (GeGLU) likewise, and its scalar reference against the tanh form in double.
TEST(Ops, GeluMulOfEveryIsaMatchesTheScalarOneAndTheTanhForm) {
  Rng rng(22);
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 100, 1024}) {
    std::vector<float> g(n), u(n);
    for (int64_t i = 0; i < n; ++i) {
      g[i] = i % 7 == 0 ? rng.uniform(-100.0f, 100.0f) : 4.0f * rng.normal();
      u[i] = rng.normal();
    }
    std::vector<float> want = g;
    gelu_mul(want.data(), u.data(), n, Isa::kScalar);
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[i];
      const double tanh_form = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * u[i];
      ASSERT_NEAR(want[i], tanh_form, 1e-6 * std::fabs(x * u[i]) + 1e-30) << "g " << g[i];
    }
    for (Isa isa : supported_isas()) {
      if (isa == Isa::kScalar) continue;
      SCOPED_TRACE(isa_name(isa));
      std::vector<float> got = g;
      gelu_mul(got.data(), u.data(), n, isa);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 6e-7f * std::fabs(g[i] * u[i]) + 1e-30f) << "n " << n << " g " << g[i];
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
