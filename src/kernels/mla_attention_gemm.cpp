// mla_attention_gemm / mla_attention_expanded: a sequence's prefill rows over its latent cache
// as GEMMs with an online softmax (kernels/mla_attention.h).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kv_block.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"

namespace pagoda::kernels {

namespace {

// What both forms share: the sequence's rows, their softmax state and the chunk walk.
struct GemmRun {
  const int32_t* pos = nullptr;  // [T] positions of the sequence's rows
  int64_t T = 0, H = 0, n_ctx = 0;
  float* m = nullptr;            // [T, H] running max
  float* l = nullptr;            // [T, H] running sum
  int64_t first = 0;             // this chunk: the first row that sees any of it
  int64_t first_block = 0;       // its row block
  int64_t row_blocks = 0;        // ceil(T / kMlaRowBlock)
};

GemmRun begin_run(const KvLayerView& layer, const int32_t* positions, const SeqSpan& seq, const AttentionParams& params,
                  float* os, int64_t v_dim, int64_t max_rows, int64_t max_heads, float* m, float* l) {
  check_kv_view(layer);
  CHECK(layer.k_only && layer.n_kv_head == 1) << "MLA attention needs a K-only (latent) cache";
  CHECK_EQ(params.window, 0) << "the GEMM paths have no window mask";
  GemmRun run;
  run.pos = positions + seq.token_begin;
  run.T = seq.n_tokens;
  run.H = params.n_head;
  CHECK(run.T > 0 && run.T <= max_rows && run.H <= max_heads) << "MLA GEMM scratch too small";
  run.n_ctx = static_cast<int64_t>(run.pos[run.T - 1]) + 1;  // the sequence's length
  for (int64_t t = 1; t < run.T; ++t) CHECK_LT(run.pos[t - 1], run.pos[t]) << "rows of a sequence must be in position order";
  CHECK_LE((run.n_ctx + layer.block_size - 1) / layer.block_size, seq.num_blocks)
      << "the block table is shorter than the sequence";
  run.m = m;
  run.l = l;
  std::fill(m, m + run.T * run.H, -INFINITY);
  std::fill(l, l + run.T * run.H, 0.0f);
  std::fill(os, os + run.T * run.H * v_dim, 0.0f);
  run.row_blocks = (run.T + kMlaRowBlock - 1) / kMlaRowBlock;
  return run;
}

// Decodes positions [c0, c0 + n) of the sequence's latent rows to chunk [n, L], a cache block
// per work item; then finds the first row that sees the chunk. False when no row does.
bool decode_chunk(const KvLayerView& layer, const SeqSpan& seq, int64_t c0, int64_t n, float* chunk, float* rows_scratch,
                  GemmRun& run, ThreadPool& pool, Isa isa) {
  const int64_t L = layer.head_dim, B = layer.block_size;
  const KvRowOps& ops = kv_row_ops(isa);
  const int64_t j0 = c0 / B, j1 = (c0 + n + B - 1) / B;
  pool.parallel_for(j1 - j0, [&](int64_t b, int64_t e, int thread) {
    float* scratch = rows_scratch + static_cast<int64_t>(thread) * 3 * L;
    detail::KvRowReader rows(layer, true, ops, scratch, scratch + L);
    for (int64_t j = j0 + b; j < j0 + e; ++j) {
      const int32_t block = seq.block_table[j];
      CHECK_GE(block, 0) << "attention reads block " << j << ", a hole of the block table";
      rows.begin_block(block, j * B, run.n_ctx, 0);
      for (int64_t p = std::max(c0, j * B); p < std::min(c0 + n, (j + 1) * B); ++p) {
        float* dst = chunk + (p - c0) * L;
        const float* r = rows.row(p - j * B, dst);
        if (r != dst) std::memcpy(dst, r, L * sizeof(float));
      }
    }
  }, ThreadPool::grain_for(B * L, ThreadPool::kMinWorkPerThread));
  run.first = 0;  // rows whose position precedes the chunk see none of it
  while (run.first < run.T && run.pos[run.first] < c0) ++run.first;
  run.first_block = run.first / kMlaRowBlock;
  return run.first < run.T;
}

// Rows [r0, r1) of head h in tile order `item` of the chunk at c0 (n positions): the columns
// any of them attends to (positions are increasing: the last row's).
void tile_rows(const GemmRun& run, int64_t item_block, int64_t c0, int64_t n, int64_t& r0, int64_t& r1, int64_t& cols) {
  r0 = std::max(run.first, (run.first_block + item_block) * kMlaRowBlock);
  r1 = std::min(run.T, (run.first_block + item_block + 1) * kMlaRowBlock);
  cols = std::min<int64_t>(n, int64_t{run.pos[r1 - 1]} + 1 - c0);
}

// Online softmax over one tile's scores s [r1 - r0, cols] of head h (turned into
// probabilities in place, masked past each row's position), rescaling the rows' accumulators
// os [T, H, v_dim].
void softmax_tile(GemmRun& run, float* s, int64_t cols, int64_t c0, int64_t r0, int64_t r1, int64_t h, float* os,
                  int64_t v_dim, Isa isa) {
  for (int64_t t = r0; t < r1; ++t) {
    float* st = s + (t - r0) * cols;
    const int64_t valid = std::min<int64_t>(cols, int64_t{run.pos[t]} + 1 - c0);
    float& mt = run.m[t * run.H + h];
    const float mx = max_of(st, valid, mt, isa);
    const float alpha = std::exp(mt - mx);  // 0 on the first chunk a row sees (m = -inf)
    const float sum = exp_shifted_sum(st, valid, mx, isa);
    std::fill(st + valid, st + cols, 0.0f);
    mt = mx;
    float& lt = run.l[t * run.H + h];
    lt = lt * alpha + sum;
    float* ot = os + (t * run.H + h) * v_dim;
    if (alpha != 1.0f) {
      for (int64_t c = 0; c < v_dim; ++c) ot[c] *= alpha;
    }
  }
}

void normalize(const GemmRun& run, float* os, int64_t v_dim) {
  for (int64_t i = 0; i < run.T * run.H; ++i) {
    const float inv = 1.0f / run.l[i];
    float* o = os + i * v_dim;
    for (int64_t c = 0; c < v_dim; ++c) o[c] *= inv;
  }
}

}  // namespace

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

void MlaGemmScratch::reserve_expanded(int64_t k_dim, int64_t v_dim) {
  CHECK(k_dim > 0 && v_dim > 0);
  k_dim_ = k_dim;
  v_dim_ = v_dim;
  k_.resize(static_cast<size_t>(chunk_size_ * k_dim));
  v_.resize(static_cast<size_t>(chunk_size_ * v_dim));
}

void mla_attention_gemm(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                        const AttentionParams& params, int64_t v_dim, float* out, MlaGemmScratch& sc,
                        ThreadPool& pool, Isa isa) {
  const int64_t L = layer.head_dim, H = params.n_head;
  CHECK(v_dim > 0 && v_dim <= L);
  CHECK(L == sc.head_dim_ && pool.num_threads() <= sc.threads_) << "MLA GEMM scratch too small";
  const float* qs = q + seq.token_begin * H * L;  // [T, H, L]
  float* os = out + seq.token_begin * H * v_dim;  // [T, H, v_dim], the accumulators
  GemmRun run = begin_run(layer, positions, seq, params, os, v_dim, sc.max_rows_, sc.n_head_, sc.m_.data(), sc.l_.data());
  const int64_t C = sc.chunk_size_;
  float* chunk = sc.chunk_.data();  // [n, L]
  for (int64_t c0 = 0; c0 < run.n_ctx; c0 += C) {
    const int64_t n = std::min(C, run.n_ctx - c0);
    if (!decode_chunk(layer, seq, c0, n, chunk, sc.rows_.data(), run, pool, isa)) continue;
    pool.parallel_for(H * (run.row_blocks - run.first_block), [&](int64_t b, int64_t e, int thread) {
      float* s = sc.s_.data() + static_cast<int64_t>(thread) * kMlaRowBlock * C;
      for (int64_t item = b; item < e; ++item) {
        const int64_t h = item % H;
        int64_t r0, r1, cols;
        tile_rows(run, item / H, c0, n, r0, r1, cols);
        const int rows = static_cast<int>(r1 - r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, static_cast<int>(cols), static_cast<int>(L),
                    params.scale, qs + (r0 * H + h) * L, static_cast<int>(H * L), chunk, static_cast<int>(L), 0.0f, s,
                    static_cast<int>(cols));
        softmax_tile(run, s, cols, c0, r0, r1, h, os, v_dim, isa);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, static_cast<int>(v_dim), static_cast<int>(cols),
                    1.0f, s, static_cast<int>(cols), chunk, static_cast<int>(L), 1.0f, os + (r0 * H + h) * v_dim,
                    static_cast<int>(H * v_dim));
      }
    }, ThreadPool::grain_for(kMlaRowBlock * n * (L + v_dim), ThreadPool::kMinWorkPerThread));
  }
  normalize(run, os, v_dim);
}

void mla_attention_expanded(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                            const AttentionParams& params, const MlaUpProjection& up, float* out, MlaGemmScratch& sc,
                            ThreadPool& pool, Isa isa) {
  const int64_t L = layer.head_dim, H = params.n_head, r = up.kv_lora_rank, dn = up.nope_dim, dv = up.v_dim;
  const int64_t dr = L - r, qh = dn + dr;
  CHECK(up.wk_b != nullptr && up.wv_b != nullptr && r > 0 && dr >= 0 && dn > 0 && dv > 0);
  CHECK(L == sc.head_dim_ && pool.num_threads() <= sc.threads_) << "MLA GEMM scratch too small";
  CHECK(sc.k_dim_ == qh && sc.v_dim_ == dv) << "MLA GEMM scratch: reserve_expanded(" << qh << ", " << dv << ") first";
  const float* qs = q + seq.token_begin * H * qh;  // [T, H, qh]
  float* os = out + seq.token_begin * H * dv;      // [T, H, dv], the accumulators
  GemmRun run = begin_run(layer, positions, seq, params, os, dv, sc.max_rows_, sc.n_head_, sc.m_.data(), sc.l_.data());
  const int64_t C = sc.chunk_size_;
  float* chunk = sc.chunk_.data();  // [n, L]
  float* k = sc.k_.data();          // [n, qh] head h's keys
  float* v = sc.v_.data();          // [n, dv] head h's values
  constexpr int64_t kRowsPerItem = 64;
  for (int64_t c0 = 0; c0 < run.n_ctx; c0 += C) {
    const int64_t n = std::min(C, run.n_ctx - c0);
    if (!decode_chunk(layer, seq, c0, n, chunk, sc.rows_.data(), run, pool, isa)) continue;
    for (int64_t h = 0; h < H; ++h) {
      // Decompress head h: K = [c . wk_b[h] | k_pe], V = c . wv_b[h]^T, 64 positions per item.
      const float* wk = up.wk_b + h * r * dn;
      const float* wv = up.wv_b + h * dv * r;
      pool.parallel_for((n + kRowsPerItem - 1) / kRowsPerItem, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t p0 = i * kRowsPerItem, np = std::min(kRowsPerItem, n - p0);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(np), static_cast<int>(dn),
                      static_cast<int>(r), 1.0f, chunk + p0 * L, static_cast<int>(L), wk, static_cast<int>(dn), 0.0f,
                      k + p0 * qh, static_cast<int>(qh));
          for (int64_t p = p0; p < p0 + np; ++p) std::memcpy(k + p * qh + dn, chunk + p * L + r, dr * sizeof(float));
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(np), static_cast<int>(dv),
                      static_cast<int>(r), 1.0f, chunk + p0 * L, static_cast<int>(L), wv, static_cast<int>(r), 0.0f,
                      v + p0 * dv, static_cast<int>(dv));
        }
      }, ThreadPool::grain_for(kRowsPerItem * r * (dn + dv), ThreadPool::kMinWorkPerThread));
      // Attend: the row blocks of head h side by side.
      pool.parallel_for(run.row_blocks - run.first_block, [&](int64_t b, int64_t e, int thread) {
        float* s = sc.s_.data() + static_cast<int64_t>(thread) * kMlaRowBlock * C;
        for (int64_t item = b; item < e; ++item) {
          int64_t r0, r1, cols;
          tile_rows(run, item, c0, n, r0, r1, cols);
          const int rows = static_cast<int>(r1 - r0);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, static_cast<int>(cols), static_cast<int>(qh),
                      params.scale, qs + (r0 * H + h) * qh, static_cast<int>(H * qh), k, static_cast<int>(qh), 0.0f, s,
                      static_cast<int>(cols));
          softmax_tile(run, s, cols, c0, r0, r1, h, os, dv, isa);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, static_cast<int>(dv), static_cast<int>(cols),
                      1.0f, s, static_cast<int>(cols), v, static_cast<int>(dv), 1.0f, os + (r0 * H + h) * dv,
                      static_cast<int>(H * dv));
        }
      }, ThreadPool::grain_for(kMlaRowBlock * n * (qh + dv), ThreadPool::kMinWorkPerThread));
    }
  }
  normalize(run, os, dv);
}

void mla_attention_heads_gemm(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
                              const AttentionParams& params, int64_t v_dim, float* out, MlaGemmScratch& sc,
                              ThreadPool& pool, Isa isa) {
  check_kv_view(layer);
  CHECK(layer.k_only && layer.n_kv_head == 1) << "MLA attention needs a K-only (latent) cache";
  CHECK_EQ(params.window, 0) << "the GEMM paths have no window mask";
  const int64_t L = layer.head_dim, H = params.n_head;
  CHECK(v_dim > 0 && v_dim <= L);
  CHECK(L == sc.head_dim_ && H <= sc.n_head_ && pool.num_threads() <= sc.threads_) << "MLA GEMM scratch too small";
  const int64_t C = std::min(sc.chunk_size_, kMlaHeadsChunk);
  // Heads per work item: the threads share the heads, at most kMlaRowBlock each (s_'s rows).
  const int64_t per_item = std::min<int64_t>(kMlaRowBlock, (H + pool.num_threads() - 1) / pool.num_threads());
  const int64_t items = (H + per_item - 1) / per_item;
  float* chunk = sc.chunk_.data();  // [n, L]
  for (int64_t t = seq.token_begin; t < seq.token_begin + seq.n_tokens; ++t) {
    const float* qt = q + t * H * L;      // [H, L]: the heads are the rows
    float* ot = out + t * H * v_dim;      // [H, v_dim]
    GemmRun run;
    run.pos = positions + t;
    run.T = 1;
    run.H = H;
    run.n_ctx = static_cast<int64_t>(positions[t]) + 1;
    CHECK_LE((run.n_ctx + layer.block_size - 1) / layer.block_size, seq.num_blocks)
        << "the block table is shorter than the sequence";
    run.m = sc.m_.data();  // [H]
    run.l = sc.l_.data();
    std::fill(run.m, run.m + H, -INFINITY);
    std::fill(run.l, run.l + H, 0.0f);
    std::fill(ot, ot + H * v_dim, 0.0f);
    for (int64_t c0 = 0; c0 < run.n_ctx; c0 += C) {
      const int64_t n = std::min(C, run.n_ctx - c0);
      decode_chunk(layer, seq, c0, n, chunk, sc.rows_.data(), run, pool, isa);
      pool.parallel_for(items, [&](int64_t b, int64_t e, int thread) {
        float* s = sc.s_.data() + static_cast<int64_t>(thread) * kMlaRowBlock * sc.chunk_size_;
        for (int64_t item = b; item < e; ++item) {
          const int64_t h0 = item * per_item, hn = std::min(per_item, H - h0);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(hn), static_cast<int>(n),
                      static_cast<int>(L), params.scale, qt + h0 * L, static_cast<int>(L), chunk, static_cast<int>(L),
                      0.0f, s, static_cast<int>(n));
          for (int64_t h = h0; h < h0 + hn; ++h) {
            float* sh = s + (h - h0) * n;
            const float mx = max_of(sh, n, run.m[h], isa);
            const float alpha = std::exp(run.m[h] - mx);  // 0 on the first chunk (m = -inf)
            run.l[h] = run.l[h] * alpha + exp_shifted_sum(sh, n, mx, isa);
            run.m[h] = mx;
            if (alpha != 1.0f) {
              for (int64_t c = 0; c < v_dim; ++c) ot[h * v_dim + c] *= alpha;
            }
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(hn), static_cast<int>(v_dim),
                      static_cast<int>(n), 1.0f, s, static_cast<int>(n), chunk, static_cast<int>(L), 1.0f,
                      ot + h0 * v_dim, static_cast<int>(v_dim));
        }
      }, 1);
    }
    normalize(run, ot, v_dim);
  }
}

bool mla_expanded_pays(const int32_t* positions, int64_t n_rows, int64_t head_dim, const MlaUpProjection& up) {
  if (n_rows < 1) return false;
  const double r = static_cast<double>(up.kv_lora_rank), dn = static_cast<double>(up.nope_dim);
  const double dv = static_cast<double>(up.v_dim), L = static_cast<double>(head_dim), qh = dn + L - r;
  double attended = 0;  // (row, position) pairs
  for (int64_t t = 0; t < n_rows; ++t) attended += static_cast<double>(positions[t]) + 1;
  const double n_ctx = static_cast<double>(positions[n_rows - 1]) + 1;
  const double absorbed = attended * (L + r) + static_cast<double>(n_rows) * r * (dn + dv);
  const double expanded = attended * (qh + dv) + n_ctx * r * (dn + dv);
  return expanded < absorbed;
}

}  // namespace pagoda::kernels
