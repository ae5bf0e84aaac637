// Attention-score KV selection: a sequence keeps at most `budget` tokens' K/V, its `recent`
// newest tokens plus the highest-scoring others, and evicted rows are dropped from its blocks
// by compaction (BlockManager::compact), so the blocks they emptied go back to the pool.
//
//   H2O (Zhang et al. 2023, "heavy hitters"): a row's score is the attention mass it received,
//     accumulated over every row computed since it was stored (prompt chunks and decode
//     steps), summed over all query heads and layers. Before a step would hold more than the
//     budget, the lowest-scored rows outside the recent ones are evicted. Eviction runs
//     during the prompt too, so the budget holds from the first chunk on; a selecting
//     sequence's prompt is fed in chunks of at most kv_select_max_chunk rows.
//   SnapKV (Li et al. 2024): the prompt is computed with its full KV; the attention of its
//     last `observe` rows (the observation window) on the earlier positions is summed over the
//     window and the query heads of each KV group, max-pooled over kSnapKvPoolKernel positions
//     per (layer, kv head), and the selection is made once, when the prompt is complete. Rows
//     appended afterwards (generated tokens) are never scored: outside the recent window they
//     are evicted first, so generation keeps the prompt's selection plus a sliding window.
//
// Per-head selection: one block table per sequence serves every layer and head, so one set
// of positions is kept for all heads. SnapKV's per-head choices are merged by rank: a position's
// key is its best rank over all (layer, kv head) pairs, so keeping the N best keys keeps the
// union of every head's top-k for the largest k that fits (ties: by rank order, then older
// first). Per-head position lists would need a block table per (layer, head) and ragged
// blocks; the union keeps one table, and the memory a kept position costs is the same as a
// full-cache token (every head's K/V), so at equal memory each head keeps fewer of its own
// picks than a per-head cache would.
//
// RoPE positions stay as assigned: K is stored after RoPE, so a kept row needs no rotation;
// the next token's position is the sequence's logical position (KvSelectState::next_position),
// not its stored length. Stored rows are not in position order after a compaction (a hole is
// filled from the tail), which attention does not care about: every stored row precedes the
// rows being appended. Selecting sequences are never prefix-cached, forked or adopted
// (SequenceOptions::cacheable is false) and take no int4 KV (kernels::kv_copy_row).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::kvcache {

enum class KvSelectMethod : uint8_t { kOff, kH2O, kSnapKv };
std::string_view kv_select_method_name(KvSelectMethod method);  // "off", "h2o", "snapkv"
std::optional<KvSelectMethod> kv_select_method_from_name(std::string_view name);

inline constexpr int64_t kSnapKvPoolKernel = 7;  // max-pool width over positions (the paper's)

struct KvSelectParams {
  KvSelectMethod method = KvSelectMethod::kOff;
  int64_t budget = 0;   // N: most tokens' KV held (SnapKV: from the end of its prompt on)
  int64_t recent = 0;   // R: newest tokens always kept, 1 <= R < N
  int64_t observe = 0;  // W: SnapKV's observation window (rows at the end of the prompt), >= 1
  bool on() const { return method != KvSelectMethod::kOff; }
  std::string describe() const;  // "h2o budget 64 recent 32"
};
// Fills unset fields with defaults (recent = N/2 for H2O, = min(W, N/2) for SnapKV; W = 32
// capped at N/2), then checks them: a clear message for each bad value.
[[nodiscard]] Status normalize_kv_select(KvSelectParams& p);
// Rows one step may append to a selecting sequence that is evicting: the eviction before it
// leaves budget - n rows, which must still hold the recent ones and as many others.
inline int64_t kv_select_max_chunk(const KvSelectParams& p) { return p.budget - p.recent > 1 ? (p.budget - p.recent) / 2 : 1; }

// Score given to rows appended after a SnapKV selection (evicted first outside the recent).
inline constexpr float kUnscoredRow = -1e30f;

// Per-sequence state (BlockManager keeps it in the sequence's table).
struct KvSelectState {
  KvSelectParams params;
  int64_t prompt = 0;              // SnapKV: observed rows are [prompt - observe, prompt)
  std::vector<int32_t> positions;  // [length] logical (RoPE) position of each stored row
  std::vector<float> scores;       // [length] H2O: accumulated mass; SnapKV: selection keys
  std::vector<float> observed;     // SnapKV until its selection: [n_heads, prompt] window sums
  int64_t next_position = 0;       // tokens ever appended (the next token's position)
  int64_t num_evicted = 0;         // rows dropped so far
  bool evicting = false;           // H2O: always; SnapKV: once its selection is made
  float new_row_score = 0.0f;      // score of appended rows (kUnscoredRow after SnapKV selects)
};

// The n_victims lowest-scored stored rows among those outside the `recent` newest positions
// (ties: the older first), ascending by row. Precondition: enough such rows exist.
void choose_victims(std::span<const int32_t> positions, std::span<const float> scores, int64_t n_victims,
                    int64_t recent, std::vector<int64_t>& out);

// SnapKV keys of positions [0, n_ctx): observed is [n_heads, n_ctx] (window sums per head).
// Each head's scores over [0, n_prefix) (the positions before the window) are max-pooled over
// `kernel` positions and ranked; key(p) = -(best rank over heads), so higher is better. Window
// positions [n_prefix, n_ctx) get key +1 (always above every prefix position).
void snapkv_keys(std::span<const float> observed, int64_t n_heads, int64_t n_ctx, int64_t n_prefix, int64_t kernel,
                 std::span<float> keys_out);

}  // namespace pagoda::kvcache
