// Batch: the flat input of one forward pass over several sequences (a ragged batch).
// Rows of one sequence are contiguous; sequences are sorted by their first row.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attention.h"

namespace pagoda::model {

// One layer's own slot mapping and block tables, where layers of a KV cache of layer groups
// (kvcache/kv_cache_spec.h) use different tables: each (group, page part) has its own.
struct LayerKv {
  std::span<const int64_t> slot_mapping;   // [n_tokens]
  std::span<const kernels::SeqSpan> seqs;  // [n_seqs], the same rows as Batch::seqs
};

struct Batch {
  std::span<const int32_t> tokens;         // [n_tokens] token ids
  std::span<const int32_t> positions;      // [n_tokens] position of each token in its sequence
  std::span<const int64_t> slot_mapping;   // [n_tokens] KV slot each new K/V row is written to
  std::span<const kernels::SeqSpan> seqs;  // [n_seqs] rows and block table of each sequence
  std::span<const int64_t> logit_rows;     // rows whose next-token logits are wanted, ascending
  // RoPE positions when they differ from `positions` (sequences whose rows were evicted keep
  // their logical positions; `positions` are then cache positions, attention's causal order).
  // Empty: positions.
  std::span<const int32_t> rope_positions;
  // Attention-score output (kvcache/kv_select.h), or null: [n_seqs, n_layer, n_kv_head,
  // score_stride] probabilities added by every layer's attention (kernels::AttentionScores;
  // observe_from: [n_seqs]).
  float* scores = nullptr;
  int64_t score_stride = 0;
  const int32_t* observe_from = nullptr;
  // [n_layer] per-layer tables (layer groups), or empty: every layer uses slot_mapping and seqs.
  std::span<const LayerKv> layer_kv;
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  std::span<const int64_t> slots_of(int64_t layer) const {
    return layer_kv.empty() ? slot_mapping : layer_kv[static_cast<size_t>(layer)].slot_mapping;
  }
  std::span<const kernels::SeqSpan> seqs_of(int64_t layer) const {
    return layer_kv.empty() ? seqs : layer_kv[static_cast<size_t>(layer)].seqs;
  }
};

}  // namespace pagoda::model
