#include "kernels/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/kv_block.h"
#include "kernels/kv_quant.h"

namespace pagoda::kernels {

namespace {

// The same sequence/run helpers as attention.cpp (kept local: the two kernels evolve apart).
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

template <typename Fn>
inline void for_each_block_of_run(int64_t begin, int64_t end, int64_t B, Fn&& fn) {
  for (int64_t j = begin / B; j * B < end; ++j) {
    fn(j, std::max(begin, j * B) - j * B, std::min(end, (j + 1) * B) - j * B);
  }
}

void check_mla_view(const KvLayerView& layer, int64_t v_dim) {
  check_kv_view(layer);
  CHECK(layer.k_only) << "MLA attention needs a K-only (latent) cache";
  CHECK_EQ(layer.n_kv_head, 1);
  CHECK(v_dim > 0 && v_dim <= layer.head_dim) << "v_dim " << v_dim << " of a " << layer.head_dim << "-wide latent";
}

}  // namespace

void mla_attention(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan* seqs,
                   int64_t n_seqs, const AttentionParams& params, int64_t v_dim, float* out, ThreadPool& pool,
                   AttentionScratch& scratch, Isa isa) {
  check_mla_view(layer, v_dim);
  const int64_t hd = layer.head_dim, B = layer.block_size, n_head = params.n_head;
  CHECK_LE(hd, scratch.head_dim());
  const int64_t max_ctx = scratch.max_context();
  const KvRowOps& ops = kv_row_ops(isa);
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n_rows = std::max(n_rows, seqs[s].token_begin + seqs[s].n_tokens);
  // Work items: (batch row, chunk of heads). All heads share the one latent row, so larger
  // chunks decode it fewer times; smaller ones give idle threads work in a short decode batch.
  const int64_t threads = pool.num_threads();
  const int64_t want = (n_head * n_rows + threads - 1) / threads;
  const int64_t chunk = std::clamp<int64_t>(want, 1, AttentionScratch::kMaxGroup);
  const int64_t chunks_per_row = (n_head + chunk - 1) / chunk;
  int64_t longest = 1;
  for (int64_t r = 0; r < n_rows; ++r) longest = std::max<int64_t>(longest, int64_t{positions[r]} + 1);
  const int64_t work_per_item = longest * (hd + v_dim) * chunk;
  pool.parallel_for(n_rows * chunks_per_row, [&](int64_t begin, int64_t end, int thread) {
    float* scores = scratch.scores(thread);  // [kMaxGroup, max_ctx]
    float* acc = scratch.accum(thread);      // [kMaxGroup, v_dim] (within [kMaxGroup, head_dim])
    detail::KvRowReader rows(layer, true, ops, scratch.row(thread), scratch.params(thread));
    int64_t s = 0;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / chunks_per_row;
      const int64_t h0 = (item % chunks_per_row) * chunk;
      const int64_t g = std::min(chunk, n_head - h0);
      while (s + 1 < n_seqs && t >= seqs[s + 1].token_begin) ++s;
      CHECK(t >= seqs[s].token_begin && t < seqs[s].token_begin + seqs[s].n_tokens)
          << "batch row " << t << " belongs to no sequence";
      const SeqSpan& seq = seqs[s];
      const int64_t seq_len = seq_length(seq, positions);
      const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
      CHECK_LE(n_ctx, max_ctx);
      CHECK_LE(n_ctx, seq_len) << "rows of a sequence must be in position order";
      const float* qh = q + (t * n_head + h0) * hd;  // [g, head_dim]
      const AttendedRange a = attended_range(params, n_ctx - 1);
      const int64_t run_begin[2] = {0, a.window_begin}, run_end[2] = {a.sink_end, n_ctx};
      for (int run = 0; run < 2; ++run) {
        for_each_block_of_run(run_begin[run], run_end[run], B, [&](int64_t j, int64_t r0, int64_t r1) {
          rows.begin_block(block_at(seq, j), j * B, seq_len, 0);
          for (int64_t r = r0; r < r1; ++r) ops.dot_group(rows.row(r), qh, g, hd, params.scale, scores + j * B + r, max_ctx);
        });
      }
      float inv[AttentionScratch::kMaxGroup];
      for (int64_t gi = 0; gi < g; ++gi) {
        float* w = scores + gi * max_ctx;
        float max_score = -INFINITY;
        for (int run = 0; run < 2; ++run) {
          for (int64_t p = run_begin[run]; p < run_end[run]; ++p) max_score = std::max(max_score, w[p]);
        }
        float sum = 0.0f;
        for (int run = 0; run < 2; ++run) {
          for (int64_t p = run_begin[run]; p < run_end[run]; ++p) sum += (w[p] = std::exp(w[p] - max_score));
        }
        inv[gi] = 1.0f / sum;
      }
      std::memset(acc, 0, g * v_dim * sizeof(float));
      for (int run = 0; run < 2; ++run) {
        for_each_block_of_run(run_begin[run], run_end[run], B, [&](int64_t j, int64_t r0, int64_t r1) {
          rows.begin_block(block_at(seq, j), j * B, seq_len, 0);
          for (int64_t r = r0; r < r1; ++r) {
            float w[AttentionScratch::kMaxGroup];
            for (int64_t gi = 0; gi < g; ++gi) w[gi] = scores[gi * max_ctx + j * B + r] * inv[gi];
            ops.axpy_group(w, rows.row(r), g, v_dim, acc);
          }
        });
      }
      std::memcpy(out + (t * n_head + h0) * v_dim, acc, g * v_dim * sizeof(float));
    }
  }, ThreadPool::grain_for(work_per_item, ThreadPool::kMinWorkPerThread));
}

void mla_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                             const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, int64_t v_dim,
                             float* out) {
  check_mla_view(layer, v_dim);
  const int64_t hd = layer.head_dim, B = layer.block_size;
  std::vector<float> row(hd);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const SeqSpan& seq = seqs[s];
    const int64_t seq_len = seq_length(seq, positions);
    auto load = [&](int64_t p) {
      const int64_t j = p / B;
      kv_load_row_reference(layer, true, block_at(seq, j), p % B, 0, (j + 1) * B > seq_len, row.data());
    };
    for (int64_t t = seq.token_begin; t < seq.token_begin + seq.n_tokens; ++t) {
      const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
      const AttendedRange a = attended_range(params, n_ctx - 1);
      auto attended = [&](int64_t p) { return params.window <= 0 || p < a.sink_end || p >= a.window_begin; };
      for (int64_t h = 0; h < params.n_head; ++h) {
        const float* qh = q + (t * params.n_head + h) * hd;
        std::vector<double> w(n_ctx, 0.0), acc(v_dim, 0.0);
        double max_score = -INFINITY, sum = 0.0;
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (!attended(p)) continue;
          load(p);
          double dot = 0.0;
          for (int64_t i = 0; i < hd; ++i) dot += static_cast<double>(row[i]) * qh[i];
          w[p] = dot * params.scale;
          max_score = std::max(max_score, w[p]);
        }
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (attended(p)) sum += (w[p] = std::exp(w[p] - max_score));
        }
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (!attended(p)) continue;
          load(p);
          for (int64_t i = 0; i < v_dim; ++i) acc[i] += w[p] / sum * row[i];
        }
        for (int64_t i = 0; i < v_dim; ++i) out[(t * params.n_head + h) * v_dim + i] = static_cast<float>(acc[i]);
      }
    }
  }
}

}  // namespace pagoda::kernels
