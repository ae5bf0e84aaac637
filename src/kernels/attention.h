// Paged attention: K/V live in fixed-size blocks of a pool; each sequence reaches its tokens
// through a block table. Position p of a sequence is at slot
//   block_table[p / block_size] * block_size + p % block_size.
//
// Physical layout of one layer (B = block_size, H = n_kv_head, D = head_dim). K and V are
// each [num_blocks] blocks of kv_block_bytes_k / kv_block_bytes_v bytes (kernels/kv_format.h);
// inside a block (scales and mins are f16, possibly unaligned):
//   f32, f16, bf16  ND  [B, H, D] elements
//                   NZ  [H*D/16, B, 16] elements (B % 16 == 0, H*D % 16 == 0): element
//                       (token t, channel c = h*D + i) at ((c/16)*B + t)*16 + c%16
//   int8, fp8-*     [B, H, D] one-byte codes, then [B, H] scales         (K and V alike)
//   int4 V          [B, H, D/2] nibble codes, then [B, H, 2] (scale, min) per token
//   int4 K          [B, H, D/2] nibble codes, then [H, D] scales, then [H, D] mins: one
//                   (scale, min) per channel over the block's B tokens (KIVI); the newest,
//                   partly filled block of a sequence waits in f32 in the stage
//                   (kernels/kv_store.h) and is quantized when its last row arrives.
// Nibbles: byte j of a row holds element j (low) and element j + D/2 (high). Formulas and
// error bounds: kernels/kv_quant.h. NZ is bit-identical to ND in attention: its rows are
// gathered into a scratch row and dotted by the same kernels.
//
// The kernel never makes a full-precision copy of the cache: for each (query row, kv head) it
// walks the sequence's blocks, decodes one K (then V) row at a time into a per-thread head_dim
// scratch row (f32 ND rows are read in place), and uses it for up to 8 query heads of the group
// at once (KvRowOps::dot_group / axpy_group: the row is loaded once per vector). Faster paths
// take what they can: the tiled AVX-512 kernel (kernels/attention_tiled.h), and on AVX2 the
// rows of prefill chunks (kernels/attention_prefill.h, which decodes 128 positions at a time,
// shared by every query row of the chunk).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_quant.h"
#include "kernels/kv_store.h"
#include "kernels/matmul.h"

namespace pagoda::kernels {

// One sequence's rows in a flat batch.
struct SeqSpan {
  int64_t token_begin = 0;               // first batch row of this sequence
  int64_t n_tokens = 0;                  // rows [token_begin, token_begin + n_tokens)
  const int32_t* block_table = nullptr;  // [num_blocks] block ids
  int64_t num_blocks = 0;
};

struct AttentionParams {
  int64_t n_head = 0;      // query heads; n_head % n_kv_head == 0 (GQA/MQA)
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
  // Mask: the row at position p attends to positions t <= p with t < n_sinks or p - t < window.
  // window == 0: unlimited (plain causal attention; n_sinks is then irrelevant).
  int64_t window = 0;
  int64_t n_sinks = 0;
};

// The positions a row at position `pos` attends to: [0, sink_end) and [window_begin, pos],
// with sink_end <= window_begin (the two runs never overlap; the first may be empty).
struct AttendedRange {
  int64_t sink_end = 0;
  int64_t window_begin = 0;
};
inline AttendedRange attended_range(const AttentionParams& params, int64_t pos) {
  if (params.window <= 0) return {0, 0};
  const int64_t window_begin = pos + 1 > params.window ? pos + 1 - params.window : 0;
  const int64_t sink_end = params.n_sinks < window_begin ? params.n_sinks : window_begin;
  return {sink_end < 0 ? 0 : sink_end, window_begin};
}

// Output of paged_attention_scores (and optionally of the reference) for attention-score KV selection (kvcache/kv_select.h):
// the softmax probabilities of each observed row, summed over the query heads of each KV group,
// are added (+=) into the row's sequence: position p of sequence s, kv head h at
//   data[s * seq_stride + h * head_stride + p]      (p < the row's context <= head_stride)
// A row at position t of sequence s is observed when t >= observe_from[s] (INT32_MAX: none).
struct AttentionScores {
  float* data = nullptr;
  int64_t seq_stride = 0;
  int64_t head_stride = 0;
  const int32_t* observe_from = nullptr;  // [n_seqs]
};

// Scratch for attention, sized once. Per thread: scores [kMaxGroup, max_context],
// accumulators [kMaxGroup, head_dim], a decoded row [head_dim] and int4 K channel
// parameters [2, head_dim]; the tiled kernel's per-thread area (tile(): decoded K/V chunks,
// lane states; kernels/attention_tiled.h). tile_items() / split_parts() hold the tiled kernel's
// work list and split-K partial results: they grow to the largest step seen, then stay.
class AttentionScratch {
 public:
  static constexpr int64_t kMaxGroup = kKvMaxGroup;  // query heads served per pass over a kv head's rows
  AttentionScratch(int num_threads, int64_t max_context, int64_t head_dim);
  float* scores(int thread) { return buffers_[thread].data(); }
  float* accum(int thread) { return scores(thread) + kMaxGroup * max_context_; }
  float* row(int thread) { return accum(thread) + kMaxGroup * head_dim_; }
  float* params(int thread) { return row(thread) + head_dim_; }
  float* tile(int thread);  // 64-byte aligned, tile_floats(head_dim) floats
  static int64_t tile_floats(int64_t head_dim);
  std::vector<int64_t>& tile_items() { return tile_items_; }
  std::vector<float>& split_parts() { return split_parts_; }
  // The AVX2 prefill kernel's per-thread storage (kernels/attention_prefill.h): a decoded K/V
  // block and the running state of every tile of one (sequence, kv head); grows to the largest
  // prefill chunk seen, then stays.
  std::vector<float>& prefill_floats(int thread) { return prefill_floats_[static_cast<size_t>(thread)]; }
  std::vector<int32_t>& prefill_ints(int thread) { return prefill_ints_[static_cast<size_t>(thread)]; }
  int64_t max_context() const { return max_context_; }
  int64_t head_dim() const { return head_dim_; }

 private:
  int64_t max_context_;
  int64_t head_dim_;
  std::vector<std::vector<float>> buffers_;  // [num_threads][kMaxGroup*(max_context+head_dim) + 3*head_dim]
  std::vector<std::vector<float>> tiles_;    // [num_threads][tile_floats(head_dim) + 16]
  std::vector<int64_t> tile_items_;
  std::vector<float> split_parts_;
  std::vector<std::vector<float>> prefill_floats_;  // [num_threads]
  std::vector<std::vector<int32_t>> prefill_ints_;  // [num_threads]
};

// Causal attention of each batch row over its sequence's cached positions [0, positions[t]],
// restricted by the window/sink mask of `params` (attended_range). Blocks holding no attended
// position are skipped without reading their block-table entries (they may be holes, -1).
// seqs: sorted by token_begin, non-overlapping, covering every row; a sequence's rows in
// position order, its last row being its newest token. The rows' own K/V must already be
// stored. q: [n_tokens, n_head, head_dim]; positions: [n_tokens]; out: [n_tokens, n_head, head_dim].
void paged_attention(const KvLayerView& layer, const float* q, const int32_t* positions,
                     const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                     ThreadPool& pool, AttentionScratch& scratch, Isa isa = detect_isa());

// The attention probabilities of the observed rows (AttentionScores), computed as
// paged_attention computes them (same dot products, softmax in float), added into `scores`.
// A pass of its own over K, so paged_attention's output stays bit for bit what it is without
// selection (the tiled kernel included); only selecting sequences pay for it.
void paged_attention_scores(const KvLayerView& layer, const float* q, const int32_t* positions, const SeqSpan* seqs,
                            int64_t n_seqs, const AttentionParams& params, const AttentionScores& scores,
                            ThreadPool& pool, AttentionScratch& scratch, Isa isa = detect_isa());

// Reference: plain loops; K/V rows dequantized element by element (kv_load_row_reference, the
// same staging rule), scores, softmax and the weighted sum in double. Same inputs and outputs
// (scores: the probabilities in double, added as floats).
void paged_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                               const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params,
                               float* out, const AttentionScores* scores = nullptr);

}  // namespace pagoda::kernels
