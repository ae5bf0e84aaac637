// Paged attention: K/V live in fixed-size blocks of a pool; each sequence reaches its tokens
// through a block table. Position p of a sequence is at slot
//   block_table[p / block_size] * block_size + p % block_size.
//
// Cache layout of one layer (ND): K and V each [num_blocks, block_size, n_kv_head, head_dim],
// element dtype f32 or f16. A slot is one row of n_kv_head * head_dim values.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"

namespace pagoda::kernels {

struct KvLayerView {
  void* k = nullptr;  // [num_blocks, block_size, n_kv_head, head_dim]
  void* v = nullptr;  // [num_blocks, block_size, n_kv_head, head_dim]
  DType dtype = DType::kF32;  // kF32 or kF16
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t slot_elems() const { return n_kv_head * head_dim; }
};

// One sequence's rows in a flat batch.
struct SeqSpan {
  int64_t token_begin = 0;               // first batch row of this sequence
  int64_t n_tokens = 0;                  // rows [token_begin, token_begin + n_tokens)
  const int32_t* block_table = nullptr;  // [num_blocks] block ids
  int64_t num_blocks = 0;
};

// Writes new K/V rows into their slots. k, v: [n_tokens, n_kv_head * head_dim] f32;
// slot_mapping: [n_tokens], each < num_blocks * block_size.
void store_kv(const KvLayerView& layer, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens);

struct AttentionParams {
  int64_t n_head = 0;      // query heads; n_head % n_kv_head == 0 (GQA/MQA)
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
};

// Scratch for attention, sized once: per thread a score row of max_context floats and an
// accumulator of head_dim floats.
class AttentionScratch {
 public:
  AttentionScratch(int num_threads, int64_t max_context, int64_t head_dim);
  float* scores(int thread) { return scores_[thread].data(); }
  float* accum(int thread) { return accum_[thread].data(); }
  int64_t max_context() const { return max_context_; }

 private:
  int64_t max_context_;
  std::vector<std::vector<float>> scores_;  // [num_threads][max_context]
  std::vector<std::vector<float>> accum_;   // [num_threads][head_dim]
};

// Causal attention of each batch row over its sequence's cached positions [0, positions[t]].
// seqs: sorted by token_begin, non-overlapping, covering every row.
// The row's own K/V must already be stored. q: [n_tokens, n_head, head_dim];
// positions: [n_tokens]; out: [n_tokens, n_head, head_dim].
void paged_attention(const KvLayerView& layer, const float* q, const int32_t* positions,
                     const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                     ThreadPool& pool, AttentionScratch& scratch, Isa isa = detect_isa());

// Reference: plain loops, softmax in double, same inputs and outputs.
void paged_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                               const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params,
                               float* out);

}  // namespace pagoda::kernels
