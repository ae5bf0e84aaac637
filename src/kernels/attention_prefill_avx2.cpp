// Prefill attention as matrix work on AVX2 + FMA (the design is at the top of
// kernels/attention_prefill.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/attention_prefill.h"
#include "kernels/exp_avx2.h"
#include "kernels/kv_block.h"

namespace pagoda::kernels::detail {

namespace {

constexpr int64_t kL = kPrefillLanes;
constexpr int64_t kC = kPrefillChunk;

struct Tile {
  int64_t s;        // sequence
  int64_t kv_head;
  int64_t lane0;    // first lane: (row t - token_begin) * group + head within the group
};

// Per-lane masks of one tile: lane l attends position p when p < n_ctx[l] and (p < sink_end[l]
// or p >= window_begin[l]); a lane past the tile's last has n_ctx 0.
struct LaneRanges {
  alignas(32) int32_t n_ctx[kL];
  alignas(32) int32_t sink_end[kL];
  alignas(32) int32_t window_begin[kL];
  int64_t lo = 0, hi = 0;  // positions any lane attends lie in [lo, hi)
  // Whether any lane attends a position of [p0, p1).
  bool any(int64_t p0, int64_t p1) const {
    for (int64_t l = 0; l < kL; ++l) {
      if (n_ctx[l] == 0) continue;
      const int64_t end = std::min<int64_t>(p1, n_ctx[l]);
      if (p0 < std::min<int64_t>(end, sink_end[l]) || std::max<int64_t>(p0, window_begin[l]) < end) return true;
    }
    return false;
  }
};

// All lanes' scores of chunk positions [p0, p0 + kC): s[j] = K[j] . Q^T, masked to -inf.
inline void chunk_scores(const float* const* k, const float* qt, int64_t hd, int64_t p0, const LaneRanges& ranges,
                         __m256 s[kC]) {
#pragma GCC unroll 8
  for (int j = 0; j < kC; ++j) s[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const __m256 qd = _mm256_load_ps(qt + d * kL);
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) s[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(k[j] + d), qd, s[j]);
  }
  const __m256i n_ctx = _mm256_load_si256(reinterpret_cast<const __m256i*>(ranges.n_ctx));
  const __m256i sink_end = _mm256_load_si256(reinterpret_cast<const __m256i*>(ranges.sink_end));
  const __m256i window_begin = _mm256_load_si256(reinterpret_cast<const __m256i*>(ranges.window_begin));
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
#pragma GCC unroll 8
  for (int j = 0; j < kC; ++j) {
    const __m256i p = _mm256_set1_epi32(static_cast<int32_t>(p0 + j));
    const __m256i in_ctx = _mm256_cmpgt_epi32(n_ctx, p);
    const __m256i in_sinks = _mm256_cmpgt_epi32(sink_end, p);
    const __m256i before_window = _mm256_cmpgt_epi32(window_begin, p);
    const __m256i ok = _mm256_and_si256(in_ctx, _mm256_or_si256(in_sinks, _mm256_xor_si256(before_window, _mm256_set1_epi32(-1))));
    s[j] = _mm256_blendv_ps(neg_inf, s[j], _mm256_castsi256_ps(ok));
  }
}

void run_tile(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
              const AttentionParams& params, const Tile& tile, int64_t group, KvRowReader& k_rows,
              KvRowReader& v_rows, float* area, float* out) {
  const int64_t hd = layer.head_dim, B = layer.block_size, n_head = params.n_head;
  float* kc = area;                // [kC, hd]
  float* vc = kc + kC * hd;        // [kC, hd]
  float* qt = vc + kC * hd;        // [hd, kL]
  float* ot = qt + hd * kL;        // [hd, kL]
  const int64_t n_lanes = seq.n_tokens * group;
  const int64_t seq_len = static_cast<int64_t>(positions[seq.token_begin + seq.n_tokens - 1]) + 1;
  LaneRanges ranges;
  ranges.lo = INT64_MAX;
  int64_t rows[kL], heads[kL];
  for (int64_t l = 0; l < kL; ++l) {
    const int64_t lane = tile.lane0 + l;
    if (lane >= n_lanes) {
      ranges.n_ctx[l] = ranges.sink_end[l] = ranges.window_begin[l] = 0;
      rows[l] = -1;
      for (int64_t d = 0; d < hd; ++d) qt[d * kL + l] = 0.0f;
      continue;
    }
    rows[l] = seq.token_begin + lane / group;
    heads[l] = tile.kv_head * group + lane % group;
    const int64_t n_ctx = static_cast<int64_t>(positions[rows[l]]) + 1;
    const AttendedRange a = attended_range(params, n_ctx - 1);
    ranges.n_ctx[l] = static_cast<int32_t>(n_ctx);
    ranges.sink_end[l] = static_cast<int32_t>(a.sink_end);
    ranges.window_begin[l] = static_cast<int32_t>(a.window_begin);
    ranges.lo = std::min(ranges.lo, a.sink_end > 0 ? int64_t{0} : a.window_begin);
    ranges.hi = std::max(ranges.hi, n_ctx);
    const float* ql = q + (rows[l] * n_head + heads[l]) * hd;
    for (int64_t d = 0; d < hd; ++d) qt[d * kL + l] = ql[d] * params.scale;
  }
  CHECK_LE(ranges.hi, seq_len);
  std::memset(ot, 0, static_cast<size_t>(hd * kL) * sizeof(float));
  __m256 m = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
  const float* krow[kC];
  const float* vrow[kC];
  int64_t k_block = -1, v_block = -1;
  for (int64_t p0 = ranges.lo / kC * kC; p0 < ranges.hi; p0 += kC) {
    if (!ranges.any(p0, p0 + kC)) continue;
    for (int64_t j = 0; j < kC; ++j) {  // decode the chunk's rows; rows no lane attends are zero
      const int64_t p = p0 + j;  // (they may lie in holes of the block table: freed out of every window)
      if (p >= ranges.hi || !ranges.any(p, p + 1)) {
        std::memset(kc + j * hd, 0, static_cast<size_t>(hd) * sizeof(float));
        std::memset(vc + j * hd, 0, static_cast<size_t>(hd) * sizeof(float));
        krow[j] = kc + j * hd;
        vrow[j] = vc + j * hd;
        continue;
      }
      const int64_t b = p / B;
      if (b != k_block) {
        CHECK_LT(b, seq.num_blocks) << "block " << b << " beyond the block table";
        const int32_t block = seq.block_table[b];
        CHECK_GE(block, 0) << "attention reads block " << b << ", a hole of the block table";
        k_rows.begin_block(block, b * B, seq_len, tile.kv_head);
        v_rows.begin_block(block, b * B, seq_len, tile.kv_head);
        k_block = v_block = b;
      }
      krow[j] = k_rows.row(p % B, kc + j * hd);
      vrow[j] = v_rows.row(p % B, vc + j * hd);
    }
    __m256 s[kC];
    chunk_scores(krow, qt, hd, p0, ranges, s);
    __m256 m_new = m;
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) m_new = _mm256_max_ps(m_new, s[j]);
    // Lanes with nothing attended yet keep -inf: base 0 (their scores are -inf, p = 0); lanes
    // with no earlier max get alpha 0.
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    const __m256 base = _mm256_and_ps(_mm256_cmp_ps(m_new, neg_inf, _CMP_NEQ_OQ), m_new);
    const __m256 alpha = _mm256_and_ps(_mm256_cmp_ps(m, neg_inf, _CMP_NEQ_OQ), exp256(_mm256_sub_ps(m, base)));
    m = m_new;
    __m256 pr[kC];
    __m256 chunk_sum = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) {
      pr[j] = _mm256_and_ps(_mm256_cmp_ps(s[j], neg_inf, _CMP_NEQ_OQ), exp256(_mm256_sub_ps(s[j], base)));
      chunk_sum = _mm256_add_ps(chunk_sum, pr[j]);
    }
    sum = _mm256_fmadd_ps(sum, alpha, chunk_sum);
    for (int64_t d = 0; d < hd; ++d) {
      __m256 o = _mm256_mul_ps(_mm256_load_ps(ot + d * kL), alpha);
#pragma GCC unroll 8
      for (int j = 0; j < kC; ++j) o = _mm256_fmadd_ps(_mm256_broadcast_ss(vrow[j] + d), pr[j], o);
      _mm256_store_ps(ot + d * kL, o);
    }
  }
  alignas(32) float inv[kL];
  _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), sum));
  for (int64_t l = 0; l < kL; ++l) {
    if (rows[l] < 0) continue;
    float* o = out + (rows[l] * n_head + heads[l]) * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = ot[d * kL + l] * inv[l];
  }
}

}  // namespace

void paged_attention_prefill_avx2(const KvLayerView& layer, const float* q, const int32_t* positions,
                                  const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                                  ThreadPool& pool, AttentionScratch& scratch, const KvRowOps& ops) {
  const int64_t hd = layer.head_dim, n_kv_head = layer.n_kv_head;
  const int64_t group = params.n_head / n_kv_head;
  CHECK_LE(prefill_area_floats(hd), AttentionScratch::tile_floats(scratch.head_dim()));
  std::vector<int64_t>& items = scratch.tile_items();  // (s, kv head, first lane) per tile
  items.clear();
  int64_t work = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const SeqSpan& seq = seqs[s];
    if (seq.n_tokens < 2) continue;
    const int64_t n_lanes = seq.n_tokens * group;
    for (int64_t h = 0; h < n_kv_head; ++h) {
      for (int64_t lane0 = 0; lane0 < n_lanes; lane0 += kL) {
        items.insert(items.end(), {s, h, lane0});
      }
    }
    work = std::max<int64_t>(work, 4 * (positions[seq.token_begin + seq.n_tokens - 1] + 1) * hd * kL);
  }
  const int64_t n_items = static_cast<int64_t>(items.size()) / 3;
  if (n_items == 0) return;
  pool.parallel_for(n_items, [&](int64_t begin, int64_t end, int thread) {
    KvRowReader k_rows(layer, true, ops, scratch.row(thread), scratch.params(thread));
    KvRowReader v_rows(layer, false, ops, scratch.row(thread), scratch.params(thread));
    float* area = scratch.tile(thread);
    for (int64_t i = begin; i < end; ++i) {
      const Tile tile{items[3 * i], items[3 * i + 1], items[3 * i + 2]};
      run_tile(layer, q, positions, seqs[tile.s], params, tile, group, k_rows, v_rows, area, out);
    }
  }, ThreadPool::grain_for(work, ThreadPool::kMinWorkPerThread));
}

}  // namespace pagoda::kernels::detail
