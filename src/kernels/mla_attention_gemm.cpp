// mla_attention_gemm: a sequence's prefill rows over its latent cache as GEMMs with an online
// softmax (kernels/mla_attention.h).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kv_block.h"
#include "kernels/mla_attention.h"

namespace pagoda::kernels {

MlaGemmScratch::MlaGemmScratch(int threads, int64_t max_rows, int64_t n_head, int64_t head_dim, int64_t chunk)
    : threads_(threads),
      max_rows_(max_rows),
      n_head_(n_head),
      head_dim_(head_dim),
      chunk_size_(chunk),
      chunk_(static_cast<size_t>(chunk * head_dim)),
      s_(static_cast<size_t>(threads) * kMlaRowBlock * chunk),
      m_(static_cast<size_t>(max_rows * n_head)),
      l_(static_cast<size_t>(max_rows * n_head)),
      rows_(static_cast<size_t>(threads) * 3 * head_dim) {
  openblas_set_num_threads(1);
}

void mla_attention_gemm(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                        const AttentionParams& params, int64_t v_dim, float* out, MlaGemmScratch& sc,
                        ThreadPool& pool, Isa isa) {
  check_kv_view(layer);
  CHECK(layer.k_only && layer.n_kv_head == 1) << "MLA attention needs a K-only (latent) cache";
  const int64_t L = layer.head_dim, B = layer.block_size, H = params.n_head, T = seq.n_tokens;
  CHECK(v_dim > 0 && v_dim <= L);
  CHECK_EQ(params.window, 0) << "the GEMM path has no window mask";
  CHECK(T > 0 && T <= sc.max_rows_ && H <= sc.n_head_ && L == sc.head_dim_ && pool.num_threads() <= sc.threads_)
      << "MLA GEMM scratch too small";
  const int32_t* pos = positions + seq.token_begin;
  const int64_t n_ctx = static_cast<int64_t>(pos[T - 1]) + 1;  // the sequence's length
  for (int64_t t = 1; t < T; ++t) CHECK_LT(pos[t - 1], pos[t]) << "rows of a sequence must be in position order";
  CHECK_LE((n_ctx + B - 1) / B, seq.num_blocks) << "the block table is shorter than the sequence";
  const KvRowOps& ops = kv_row_ops(isa);
  const float* qs = q + seq.token_begin * H * L;         // [T, H, L]
  float* os = out + seq.token_begin * H * v_dim;         // [T, H, v_dim], the accumulators
  float* m = sc.m_.data();                               // [T, H]
  float* l = sc.l_.data();
  std::fill(m, m + T * H, -INFINITY);
  std::fill(l, l + T * H, 0.0f);
  std::fill(os, os + T * H * v_dim, 0.0f);
  const int64_t row_blocks = (T + kMlaRowBlock - 1) / kMlaRowBlock;
  const int64_t C = sc.chunk_size_;
  for (int64_t c0 = 0; c0 < n_ctx; c0 += C) {
    const int64_t n = std::min(C, n_ctx - c0);
    float* chunk = sc.chunk_.data();  // [n, L]
    // Decode the chunk's rows once for every head, a cache block per work item.
    const int64_t j0 = c0 / B, j1 = (c0 + n + B - 1) / B;
    pool.parallel_for(j1 - j0, [&](int64_t b, int64_t e, int thread) {
      float* scratch = sc.rows_.data() + static_cast<int64_t>(thread) * 3 * L;
      detail::KvRowReader rows(layer, true, ops, scratch, scratch + L);
      for (int64_t j = j0 + b; j < j0 + e; ++j) {
        const int32_t block = seq.block_table[j];
        CHECK_GE(block, 0) << "attention reads block " << j << ", a hole of the block table";
        rows.begin_block(block, j * B, n_ctx, 0);
        for (int64_t p = std::max(c0, j * B); p < std::min(c0 + n, (j + 1) * B); ++p) {
          float* dst = chunk + (p - c0) * L;
          const float* r = rows.row(p - j * B, dst);
          if (r != dst) std::memcpy(dst, r, L * sizeof(float));
        }
      }
    }, ThreadPool::grain_for(B * L, ThreadPool::kMinWorkPerThread));
    // Rows whose position precedes the chunk see none of it.
    int64_t first = 0;
    while (first < T && pos[first] < c0) ++first;
    if (first == T) continue;
    const int64_t first_block = first / kMlaRowBlock;
    const int64_t items = H * (row_blocks - first_block);
    pool.parallel_for(items, [&](int64_t b, int64_t e, int thread) {
      float* s = sc.s_.data() + static_cast<int64_t>(thread) * kMlaRowBlock * C;
      for (int64_t item = b; item < e; ++item) {
        const int64_t h = item % H;
        const int64_t r0 = std::max(first, (first_block + item / H) * kMlaRowBlock);
        const int64_t r1 = std::min(T, (first_block + item / H + 1) * kMlaRowBlock);
        const int64_t rows = r1 - r0;
        // Columns any of these rows attends to (positions are increasing: the last row's).
        const int64_t cols = std::min<int64_t>(n, int64_t{pos[r1 - 1]} + 1 - c0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(cols),
                    static_cast<int>(L), params.scale, qs + (r0 * H + h) * L, static_cast<int>(H * L), chunk,
                    static_cast<int>(L), 0.0f, s, static_cast<int>(cols));
        for (int64_t t = r0; t < r1; ++t) {
          float* st = s + (t - r0) * cols;
          const int64_t valid = std::min<int64_t>(cols, int64_t{pos[t]} + 1 - c0);
          float& mt = m[t * H + h];
          float mx = mt;
          for (int64_t c = 0; c < valid; ++c) mx = std::max(mx, st[c]);
          const float alpha = std::exp(mt - mx);  // 0 on the first chunk a row sees (m = -inf)
          float sum = 0.0f;
          for (int64_t c = 0; c < valid; ++c) sum += (st[c] = std::exp(st[c] - mx));
          std::fill(st + valid, st + cols, 0.0f);
          mt = mx;
          float& lt = l[t * H + h];
          lt = lt * alpha + sum;
          float* ot = os + (t * H + h) * v_dim;
          if (alpha != 1.0f) {
            for (int64_t c = 0; c < v_dim; ++c) ot[c] *= alpha;
          }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(v_dim),
                    static_cast<int>(cols), 1.0f, s, static_cast<int>(cols), chunk, static_cast<int>(L), 1.0f,
                    os + (r0 * H + h) * v_dim, static_cast<int>(H * v_dim));
      }
    }, ThreadPool::grain_for(kMlaRowBlock * n * (L + v_dim), ThreadPool::kMinWorkPerThread));
  }
  for (int64_t i = 0; i < T * H; ++i) {
    const float inv = 1.0f / l[i];
    float* o = os + i * v_dim;
    for (int64_t c = 0; c < v_dim; ++c) o[c] *= inv;
  }
}

}  // namespace pagoda::kernels
