#include "kernels/attention.h"

#include <climits>
#include <cstdint>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/attention_prefill.h"
#include "kernels/attention_tiled.h"
#include "kernels/kv_block.h"
#include "kernels/kv_quant.h"

namespace pagoda::kernels {

namespace {

// Tokens stored for `seq`: its last row is its newest token.
inline int64_t seq_length(const SeqSpan& seq, const int32_t* positions) {
  CHECK_GT(seq.n_tokens, 0) << "empty sequence span";
  return static_cast<int64_t>(positions[seq.token_begin + seq.n_tokens - 1]) + 1;
}

inline int32_t block_at(const SeqSpan& seq, int64_t index) {
  CHECK_LT(index, seq.num_blocks) << "block " << index << " beyond the block table";
  const int32_t block = seq.block_table[index];
  CHECK_GE(block, 0) << "attention reads block " << index << ", a hole of the block table";
  return block;
}

// Prefetches the row kPrefetchRows positions after position p, if still below run_end.
constexpr int64_t kPrefetchRows = 4;
inline void prefetch_ahead(const detail::KvRowReader& reader, const SeqSpan& seq, int64_t p, int64_t B,
                           int64_t run_end) {
  p += kPrefetchRows;
  if (p < run_end) reader.prefetch(seq.block_table[p / B], p % B);
}

// Calls fn(j, r_begin, r_end) for each block j holding positions of the run [begin, end),
// with its rows [r_begin, r_end) inside the run.
template <typename Fn>
inline void for_each_block_of_run(int64_t begin, int64_t end, int64_t B, Fn&& fn) {
  for (int64_t j = begin / B; j * B < end; ++j) {
    fn(j, std::max(begin, j * B) - j * B, std::min(end, (j + 1) * B) - j * B);
  }
}

// The attended runs of a row whose context is [0, n_ctx): [0, sink_end) and [window_begin, n_ctx).
struct Runs {
  int64_t begin[2], end[2];
};
inline Runs attended_runs(const AttentionParams& params, int64_t n_ctx) {
  const AttendedRange a = attended_range(params, n_ctx - 1);
  return Runs{{0, a.window_begin}, {a.sink_end, n_ctx}};
}

// Softmax numerators of one score row over its runs, in place: w[p] = exp(w[p] - max); returns
// 1 / sum (the output and score passes share it, so their probabilities agree bit for bit).
inline float exp_scores_over_runs(float* w, const Runs& runs) {
  float max_score = -INFINITY;
  for (int run = 0; run < 2; ++run) {
    for (int64_t p = runs.begin[run]; p < runs.end[run]; ++p) max_score = std::max(max_score, w[p]);
  }
  float sum = 0.0f;
  for (int run = 0; run < 2; ++run) {
    for (int64_t p = runs.begin[run]; p < runs.end[run]; ++p) {
      w[p] = std::exp(w[p] - max_score);
      sum += w[p];
    }
  }
  return 1.0f / sum;
}

}  // namespace

AttentionScratch::AttentionScratch(int num_threads, int64_t max_context, int64_t head_dim)
    : max_context_(max_context),
      head_dim_(head_dim),
      buffers_(num_threads, std::vector<float>(kMaxGroup * (max_context + head_dim) + 3 * head_dim)),
      tiles_(num_threads, std::vector<float>(tile_floats(head_dim) + 16)),
      prefill_floats_(static_cast<size_t>(num_threads)),
      prefill_ints_(static_cast<size_t>(num_threads)) {
  tile_items_.reserve(4096);
}

int64_t AttentionScratch::tile_floats(int64_t head_dim) {
  // The tiled kernel's area (kernels/attention_tiled.h has its layout), plus slack.
  return detail::tile_area_floats((head_dim + 15) / 16 * 16) + 64;
}

float* AttentionScratch::tile(int thread) {
  auto p = reinterpret_cast<uintptr_t>(tiles_[thread].data());
  return reinterpret_cast<float*>((p + 63) / 64 * 64);
}

void paged_attention(const KvLayerView& layer, const float* q, const int32_t* positions,
                     const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                     ThreadPool& pool, AttentionScratch& scratch, Isa isa) {
  check_kv_view(layer);
  if (isa >= Isa::kAvx512 && detail::tiled_attention_supports(layer)) {
    CHECK_LE(layer.head_dim, scratch.head_dim());
    detail::paged_attention_tiled_avx512(layer, q, positions, seqs, n_seqs, params, out, pool, scratch);
    return;
  }
  const int64_t hd = layer.head_dim, B = layer.block_size, n_kv_head = layer.n_kv_head;
  const int64_t n_head = params.n_head;
  CHECK_EQ(n_head % n_kv_head, 0);
  CHECK_LE(hd, scratch.head_dim());
  const int64_t group = n_head / n_kv_head;
  const int64_t max_ctx = scratch.max_context();
  const KvRowOps& ops = kv_row_ops(isa);
  // Sequences of several rows (prefill chunks) on AVX2 and up: matrix work, each K/V row decoded
  // once for all the chunk's rows of a kv head (kernels/attention_prefill.h). The per-row path
  // below then takes the single rows (decodes).
  bool tiled_prefill = false;
  for (int64_t s = 0; s < n_seqs && isa >= Isa::kAvx2; ++s) tiled_prefill = tiled_prefill || seqs[s].n_tokens >= 2;
  if (tiled_prefill) {
    detail::paged_attention_prefill_avx2(layer, q, positions, seqs, n_seqs, params, out, pool, scratch, ops);
  }

  // Work items: (batch row, kv head); each serves the group's query heads, kMaxGroup at a time,
  // so every K/V row is decoded once per item.
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n_rows = std::max(n_rows, seqs[s].token_begin + seqs[s].n_tokens);
  // Multiply-adds of one item at most (the longest attended context), to keep tiny jobs inline.
  int64_t longest = 1;
  for (int64_t r = 0; r < n_rows; ++r) longest = std::max<int64_t>(longest, int64_t{positions[r]} + 1);
  const int64_t work_per_item = 2 * longest * hd * group;
  pool.parallel_for(n_rows * n_kv_head, [&](int64_t begin, int64_t end, int thread) {
    float* scores = scratch.scores(thread);  // [kMaxGroup, max_ctx]
    float* acc = scratch.accum(thread);      // [kMaxGroup, head_dim]
    detail::KvRowReader k_rows(layer, true, ops, scratch.row(thread), scratch.params(thread));
    detail::KvRowReader v_rows(layer, false, ops, scratch.row(thread), scratch.params(thread));
    int64_t s = 0;  // items are visited in row order, so the sequence index only moves forward
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_kv_head;
      const int64_t kv_head = item % n_kv_head;
      while (s + 1 < n_seqs && t >= seqs[s + 1].token_begin) ++s;
      CHECK(t >= seqs[s].token_begin && t < seqs[s].token_begin + seqs[s].n_tokens)
          << "batch row " << t << " belongs to no sequence";
      const SeqSpan& seq = seqs[s];
      if (tiled_prefill && seq.n_tokens >= 2) continue;  // done above
      const int64_t seq_len = seq_length(seq, positions);
      const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
      CHECK_LE(n_ctx, max_ctx);
      CHECK_LE(n_ctx, seq_len) << "rows of a sequence must be in position order";
      for (int64_t h0 = kv_head * group; h0 < (kv_head + 1) * group; h0 += AttentionScratch::kMaxGroup) {
        const int64_t g = std::min(AttentionScratch::kMaxGroup, (kv_head + 1) * group - h0);
        const float* qh = q + (t * n_head + h0) * hd;  // [g, head_dim]
        const Runs runs = attended_runs(params, n_ctx);
        for (int run = 0; run < 2; ++run) {
          for_each_block_of_run(runs.begin[run], runs.end[run], B, [&](int64_t j, int64_t r0, int64_t r1) {
            k_rows.begin_block(block_at(seq, j), j * B, seq_len, kv_head);
            for (int64_t r = r0; r < r1; ++r) {
              prefetch_ahead(k_rows, seq, j * B + r, B, runs.end[run]);
              ops.dot_group(k_rows.row(r), qh, g, hd, params.scale, scores + j * B + r, max_ctx);
            }
          });
        }
        float inv[AttentionScratch::kMaxGroup];
        for (int64_t gi = 0; gi < g; ++gi) inv[gi] = exp_scores_over_runs(scores + gi * max_ctx, runs);
        std::memset(acc, 0, g * hd * sizeof(float));
        for (int run = 0; run < 2; ++run) {
          for_each_block_of_run(runs.begin[run], runs.end[run], B, [&](int64_t j, int64_t r0, int64_t r1) {
            v_rows.begin_block(block_at(seq, j), j * B, seq_len, kv_head);
            for (int64_t r = r0; r < r1; ++r) {
              prefetch_ahead(v_rows, seq, j * B + r, B, runs.end[run]);
              float w[AttentionScratch::kMaxGroup];
              for (int64_t gi = 0; gi < g; ++gi) w[gi] = scores[gi * max_ctx + j * B + r] * inv[gi];
              ops.axpy_group(w, v_rows.row(r), g, hd, acc);
            }
          });
        }
        std::memcpy(out + (t * n_head + h0) * hd, acc, g * hd * sizeof(float));
      }
    }
  }, ThreadPool::grain_for(work_per_item, ThreadPool::kMinWorkPerThread));
}

void paged_attention_scores(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan* seqs,
                            int64_t n_seqs, const AttentionParams& params, const AttentionScores& scores_out,
                            ThreadPool& pool, AttentionScratch& scratch, Isa isa) {
  check_kv_view(layer);
  const int64_t hd = layer.head_dim, B = layer.block_size, n_kv_head = layer.n_kv_head;
  const int64_t n_head = params.n_head;
  CHECK_EQ(n_head % n_kv_head, 0);
  CHECK_LE(hd, scratch.head_dim());
  const int64_t group = n_head / n_kv_head;
  const int64_t max_ctx = scratch.max_context();
  const KvRowOps& ops = kv_row_ops(isa);
  // One item per (sequence, kv head), its observed rows in order: no two threads add into one
  // slice. Per row and query-head chunk: the scores as paged_attention computes them, softmax,
  // and the probabilities summed over the chunk's heads added into the slice.
  pool.parallel_for(n_seqs * n_kv_head, [&](int64_t begin, int64_t end, int thread) {
    float* w = scratch.scores(thread);  // [kMaxGroup, max_ctx]
    detail::KvRowReader k_rows(layer, true, ops, scratch.row(thread), scratch.params(thread));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / n_kv_head, kv_head = item % n_kv_head;
      const SeqSpan& seq = seqs[s];
      if (scores_out.observe_from[s] == INT32_MAX) continue;
      const int64_t seq_len = seq_length(seq, positions);
      float* slice = scores_out.data + s * scores_out.seq_stride + kv_head * scores_out.head_stride;
      for (int64_t t = seq.token_begin; t < seq.token_begin + seq.n_tokens; ++t) {
        if (positions[t] < scores_out.observe_from[s]) continue;
        const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
        CHECK_LE(n_ctx, max_ctx);
        CHECK_LE(n_ctx, scores_out.head_stride) << "attention scores slice too short";
        const Runs runs = attended_runs(params, n_ctx);
        for (int64_t h0 = kv_head * group; h0 < (kv_head + 1) * group; h0 += AttentionScratch::kMaxGroup) {
          const int64_t g = std::min(AttentionScratch::kMaxGroup, (kv_head + 1) * group - h0);
          const float* qh = q + (t * n_head + h0) * hd;
          for (int run = 0; run < 2; ++run) {
            for_each_block_of_run(runs.begin[run], runs.end[run], B, [&](int64_t j, int64_t r0, int64_t r1) {
              k_rows.begin_block(block_at(seq, j), j * B, seq_len, kv_head);
              for (int64_t r = r0; r < r1; ++r) ops.dot_group(k_rows.row(r), qh, g, hd, params.scale, w + j * B + r, max_ctx);
            });
          }
          for (int64_t gi = 0; gi < g; ++gi) {
            float* wg = w + gi * max_ctx;
            const float inv = exp_scores_over_runs(wg, runs);
            for (int run = 0; run < 2; ++run) {
              for (int64_t p = runs.begin[run]; p < runs.end[run]; ++p) slice[p] += wg[p] * inv;
            }
          }
        }
      }
    }
  }, 1);
}

void paged_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                               const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params,
                               float* out, const AttentionScores* scores) {
  check_kv_view(layer);
  const int64_t hd = layer.head_dim, B = layer.block_size;
  const int64_t group = params.n_head / layer.n_kv_head;
  std::vector<float> row(hd);
  std::vector<double> acc(hd);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const SeqSpan& seq = seqs[s];
    const int64_t seq_len = seq_length(seq, positions);
    // Row p of the sequence for kv head h, as the kernel reads it (stage only for a partial block).
    auto load = [&](bool is_k, int64_t p, int64_t h) {
      const int64_t j = p / B;
      kv_load_row_reference(layer, is_k, block_at(seq, j), p % B, h, (j + 1) * B > seq_len, row.data());
    };
    for (int64_t t = seq.token_begin; t < seq.token_begin + seq.n_tokens; ++t) {
      const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
      for (int64_t h = 0; h < params.n_head; ++h) {
        const int64_t kv_head = h / group;
        const float* qh = q + (t * params.n_head + h) * hd;
        const AttendedRange a = attended_range(params, n_ctx - 1);
        auto attended = [&](int64_t p) { return params.window <= 0 || p < a.sink_end || p >= a.window_begin; };
        std::vector<double> w(n_ctx, 0.0);
        double max_score = -INFINITY;
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (!attended(p)) continue;
          load(true, p, kv_head);
          double dot = 0.0;
          for (int64_t i = 0; i < hd; ++i) dot += static_cast<double>(row[i]) * qh[i];
          w[p] = dot * params.scale;
          max_score = std::max(max_score, w[p]);
        }
        double sum = 0.0;
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (attended(p)) sum += (w[p] = std::exp(w[p] - max_score));
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (!attended(p)) continue;
          load(false, p, kv_head);
          for (int64_t i = 0; i < hd; ++i) acc[i] += w[p] / sum * row[i];
          if (scores != nullptr && positions[t] >= scores->observe_from[s]) {
            scores->data[s * scores->seq_stride + kv_head * scores->head_stride + p] += static_cast<float>(w[p] / sum);
          }
        }
        for (int64_t i = 0; i < hd; ++i) out[(t * params.n_head + h) * hd + i] = static_cast<float>(acc[i]);
      }
    }
  }
}

}  // namespace pagoda::kernels
