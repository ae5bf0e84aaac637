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
constexpr int64_t kKeyBlock = kPrefillKeyBlock;

// One tile's lanes: lane l is batch row rows[l], query head heads[l] (row -1: past the tile's
// last lane), and attends position p when p < n_ctx[l] and (p < sink_end[l] or
// p >= window_begin[l]); a lane past the last has n_ctx 0. Kept in the thread's int storage
// (AttentionScratch::prefill_ints), copied in and out.
struct Lanes {
  int32_t n_ctx[kL];
  int32_t sink_end[kL];
  int32_t window_begin[kL];
  int32_t rows[kL];
  int32_t heads[kL];
  // Whether any lane attends a position of [p0, p1).
  bool any(int64_t p0, int64_t p1) const {
    for (int64_t l = 0; l < kL; ++l) {
      if (n_ctx[l] == 0) continue;
      const int64_t end = std::min<int64_t>(p1, n_ctx[l]);
      if (p0 < std::min<int64_t>(end, sink_end[l]) || std::max<int64_t>(p0, window_begin[l]) < end) return true;
    }
    return false;
  }
  int64_t lo() const {  // every attended position is >= lo() ...
    int64_t lo = INT64_MAX;
    for (int64_t l = 0; l < kL; ++l) {
      if (n_ctx[l] > 0) lo = std::min<int64_t>(lo, sink_end[l] > 0 ? 0 : window_begin[l]);
    }
    return lo == INT64_MAX ? 0 : lo;
  }
  int64_t hi() const {  // ... and < hi()
    int64_t hi = 0;
    for (int64_t l = 0; l < kL; ++l) hi = std::max<int64_t>(hi, n_ctx[l]);
    return hi;
  }
};
constexpr int64_t kLaneInts = sizeof(Lanes) / sizeof(int32_t);
static_assert(sizeof(Lanes) == 5 * kL * sizeof(int32_t));

// A tile's floats (AttentionScratch::prefill_floats): Q^T [hd, kL] (scaled), O^T [hd, kL]
// (unnormalized), the running max m [kL] and sum l [kL]; 32-byte aligned when its base is.
struct TileFloats {
  float *qt, *ot, *m, *l;
};
inline int64_t tile_floats(int64_t hd) { return 2 * hd * kL + 2 * kL; }
inline TileFloats tile_at(float* base, int64_t i, int64_t hd) {
  float* t = base + i * tile_floats(hd);
  return {t, t + hd * kL, t + 2 * hd * kL, t + 2 * hd * kL + kL};
}

// Tile lanes [lane0, lane0 + kL) of sequence `seq` and kv head `kv_head`: its Lanes, Q^T,
// O^T = 0, m = -inf, l = 0.
Lanes begin_tile(const float* q, const int32_t* positions, const SeqSpan& seq, const AttentionParams& params,
                 int64_t kv_head, int64_t group, int64_t lane0, int64_t hd, const TileFloats& t) {
  const int64_t n_lanes = seq.n_tokens * group;
  Lanes lanes{};
  for (int64_t l = 0; l < kL; ++l) {
    const int64_t lane = lane0 + l;
    t.m[l] = -INFINITY;
    t.l[l] = 0.0f;
    if (lane >= n_lanes) {
      lanes.rows[l] = -1;
      for (int64_t d = 0; d < hd; ++d) t.qt[d * kL + l] = 0.0f;
      continue;
    }
    lanes.rows[l] = static_cast<int32_t>(seq.token_begin + lane / group);
    lanes.heads[l] = static_cast<int32_t>(kv_head * group + lane % group);
    const int64_t n_ctx = static_cast<int64_t>(positions[lanes.rows[l]]) + 1;
    const AttendedRange a = attended_range(params, n_ctx - 1);
    lanes.n_ctx[l] = static_cast<int32_t>(n_ctx);
    lanes.sink_end[l] = static_cast<int32_t>(a.sink_end);
    lanes.window_begin[l] = static_cast<int32_t>(a.window_begin);
    const float* ql = q + (lanes.rows[l] * params.n_head + lanes.heads[l]) * hd;
    for (int64_t d = 0; d < hd; ++d) t.qt[d * kL + l] = ql[d] * params.scale;
  }
  std::memset(t.ot, 0, static_cast<size_t>(hd * kL) * sizeof(float));
  return lanes;
}

// All lanes' scores of chunk positions [p0, p0 + kC): s[j] = K[j] . Q^T, masked to -inf.
inline void chunk_scores(const float* const* k, const float* qt, int64_t hd, int64_t p0, const Lanes& lanes,
                         __m256 s[kC]) {
#pragma GCC unroll 8
  for (int j = 0; j < kC; ++j) s[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const __m256 qd = _mm256_load_ps(qt + d * kL);
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) s[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(k[j] + d), qd, s[j]);
  }
  const __m256i n_ctx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes.n_ctx));
  const __m256i sink_end = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes.sink_end));
  const __m256i window_begin = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes.window_begin));
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
#pragma GCC unroll 8
  for (int j = 0; j < kC; ++j) {
    const __m256i p = _mm256_set1_epi32(static_cast<int32_t>(p0 + j));
    const __m256i in_ctx = _mm256_cmpgt_epi32(n_ctx, p);
    const __m256i in_sinks = _mm256_cmpgt_epi32(sink_end, p);
    const __m256i in_window = _mm256_xor_si256(_mm256_cmpgt_epi32(window_begin, p), _mm256_set1_epi32(-1));
    const __m256i ok = _mm256_and_si256(in_ctx, _mm256_or_si256(in_sinks, in_window));
    s[j] = _mm256_blendv_ps(neg_inf, s[j], _mm256_castsi256_ps(ok));
  }
}

// One tile's online softmax over decoded positions [k0, k1) (krow / vrow: a row per position
// from k0, a multiple of kC).
void tile_over_rows(const Lanes& lanes, const TileFloats& t, const float* const* krow, const float* const* vrow,
                    int64_t k0, int64_t k1, int64_t hd) {
  __m256 m = _mm256_load_ps(t.m), sum = _mm256_load_ps(t.l);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  for (int64_t p0 = std::max(k0, lanes.lo() / kC * kC); p0 < std::min(k1, lanes.hi()); p0 += kC) {
    if (!lanes.any(p0, p0 + kC)) continue;
    __m256 s[kC];
    chunk_scores(krow + (p0 - k0), t.qt, hd, p0, lanes, s);
    __m256 m_new = m;
#pragma GCC unroll 8
    for (int j = 0; j < kC; ++j) m_new = _mm256_max_ps(m_new, s[j]);
    // Lanes with nothing attended yet keep -inf: base 0 (their scores are -inf, p = 0); lanes
    // with no earlier max get alpha 0.
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
    const float* const* v = vrow + (p0 - k0);
    for (int64_t d = 0; d < hd; ++d) {
      __m256 o = _mm256_mul_ps(_mm256_load_ps(t.ot + d * kL), alpha);
#pragma GCC unroll 8
      for (int j = 0; j < kC; ++j) o = _mm256_fmadd_ps(_mm256_broadcast_ss(v[j] + d), pr[j], o);
      _mm256_store_ps(t.ot + d * kL, o);
    }
  }
  _mm256_store_ps(t.m, m);
  _mm256_store_ps(t.l, sum);
}

// Tiles [tile0, tile0 + n_tiles) of sequence `seq` and kv head `kv_head`: the attended
// positions kKeyBlock at a time, each key block's K/V rows decoded once and used by every tile.
// Rows no lane attends are zero rows (they may lie in holes of the block table: freed out of
// every window).
void run_item(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan& seq,
              const AttentionParams& params, int64_t kv_head, int64_t group, int64_t tile0, int64_t n_tiles,
              KvRowReader& k_rows, KvRowReader& v_rows, std::vector<float>& floats, std::vector<int32_t>& ints,
              float* out) {
  const int64_t hd = layer.head_dim, B = layer.block_size;
  const int64_t seq_len = static_cast<int64_t>(positions[seq.token_begin + seq.n_tokens - 1]) + 1;
  floats.resize(static_cast<size_t>(2 * kKeyBlock * hd + n_tiles * tile_floats(hd) + 8));
  ints.resize(static_cast<size_t>(n_tiles * kLaneInts));
  float* kc = floats.data() + (8 - reinterpret_cast<uintptr_t>(floats.data()) / 4 % 8) % 8;  // 32-byte aligned
  float* vc = kc + kKeyBlock * hd;
  float* states = vc + kKeyBlock * hd;
  const auto lanes_of = [&](int64_t i) {
    Lanes lanes;
    std::memcpy(&lanes, ints.data() + i * kLaneInts, sizeof(Lanes));
    return lanes;
  };
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t i = 0; i < n_tiles; ++i) {
    const Lanes lanes =
        begin_tile(q, positions, seq, params, kv_head, group, (tile0 + i) * kL, hd, tile_at(states, i, hd));
    std::memcpy(ints.data() + i * kLaneInts, &lanes, sizeof(Lanes));
    lo = std::min(lo, lanes.lo());
    hi = std::max(hi, lanes.hi());
  }
  CHECK_LE(hi, seq_len);
  const float* krow[kKeyBlock];
  const float* vrow[kKeyBlock];
  int64_t block_index = -1;
  for (int64_t k0 = lo / kC * kC; k0 < hi; k0 += kKeyBlock) {
    const int64_t k1 = std::min(k0 + kKeyBlock, hi);
    for (int64_t p = k0; p < (k1 + kC - 1) / kC * kC; ++p) {
      float* kd = kc + (p - k0) * hd;
      float* vd = vc + (p - k0) * hd;
      // Without a window the lane of the longest context attends every position below hi.
      bool wanted = p < k1 && params.window <= 0;
      for (int64_t i = 0; i < n_tiles && p < k1 && !wanted; ++i) wanted = lanes_of(i).any(p, p + 1);
      if (!wanted) {
        std::memset(kd, 0, static_cast<size_t>(hd) * sizeof(float));
        std::memset(vd, 0, static_cast<size_t>(hd) * sizeof(float));
        krow[p - k0] = kd;
        vrow[p - k0] = vd;
        continue;
      }
      const int64_t b = p / B;
      if (b != block_index) {
        CHECK_LT(b, seq.num_blocks) << "block " << b << " beyond the block table";
        const int32_t block = seq.block_table[b];
        CHECK_GE(block, 0) << "attention reads block " << b << ", a hole of the block table";
        k_rows.begin_block(block, b * B, seq_len, kv_head);
        v_rows.begin_block(block, b * B, seq_len, kv_head);
        block_index = b;
      }
      krow[p - k0] = k_rows.row(p % B, kd);
      vrow[p - k0] = v_rows.row(p % B, vd);
    }
    for (int64_t i = 0; i < n_tiles; ++i) tile_over_rows(lanes_of(i), tile_at(states, i, hd), krow, vrow, k0, k1, hd);
  }
  for (int64_t i = 0; i < n_tiles; ++i) {
    const Lanes lanes = lanes_of(i);
    const TileFloats t = tile_at(states, i, hd);
    for (int64_t l = 0; l < kL; ++l) {
      if (lanes.rows[l] < 0) continue;
      const float inv = 1.0f / t.l[l];
      float* o = out + (static_cast<int64_t>(lanes.rows[l]) * params.n_head + lanes.heads[l]) * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] = t.ot[d * kL + l] * inv;
    }
  }
}

}  // namespace

void paged_attention_prefill_avx2(const KvLayerView& layer, const float* q, const int32_t* positions,
                                  const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                                  ThreadPool& pool, AttentionScratch& scratch, const KvRowOps& ops) {
  const int64_t n_kv_head = layer.n_kv_head;
  const int64_t group = params.n_head / n_kv_head;
  // Items: (sequence, kv head, first tile, tiles). A (sequence, kv head) is cut into parts
  // when there are fewer of them than twice the threads (each part decodes its rows itself).
  int64_t n_pairs = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n_pairs += seqs[s].n_tokens >= 2 ? n_kv_head : 0;
  if (n_pairs == 0) return;
  const int64_t parts = std::max<int64_t>(1, (2 * pool.num_threads() + n_pairs - 1) / n_pairs);
  std::vector<int64_t>& items = scratch.tile_items();
  items.clear();
  for (int64_t s = 0; s < n_seqs; ++s) {
    if (seqs[s].n_tokens < 2) continue;
    const int64_t n_tiles = (seqs[s].n_tokens * group + kL - 1) / kL;
    const int64_t per_part = (n_tiles + parts - 1) / parts;
    for (int64_t h = 0; h < n_kv_head; ++h) {
      for (int64_t t0 = 0; t0 < n_tiles; t0 += per_part) items.insert(items.end(), {s, h, t0, std::min(per_part, n_tiles - t0)});
    }
  }
  const int64_t n_items = static_cast<int64_t>(items.size()) / 4;
  pool.parallel_for(n_items, [&](int64_t begin, int64_t end, int thread) {
    KvRowReader k_rows(layer, true, ops, scratch.row(thread), scratch.params(thread));
    KvRowReader v_rows(layer, false, ops, scratch.row(thread), scratch.params(thread));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t* it = items.data() + 4 * i;
      run_item(layer, q, positions, seqs[it[0]], params, it[1], group, it[2], it[3], k_rows, v_rows,
               scratch.prefill_floats(thread), scratch.prefill_ints(thread), out);
    }
  }, 1);
}

}  // namespace pagoda::kernels::detail
