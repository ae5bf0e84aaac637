#include "kernels/attention.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/vec.h"

namespace pagoda::kernels {

namespace {

size_t elem_bytes(DType dtype) {
  CHECK(dtype == DType::kF32 || dtype == DType::kF16) << "KV dtype " << dtype_name(dtype);
  return dtype == DType::kF32 ? 4 : 2;
}

// Byte offset of (slot, kv_head) in a layer's K or V array.
inline size_t slot_offset(const KvLayerView& layer, int64_t slot, int64_t kv_head) {
  return (static_cast<size_t>(slot) * layer.slot_elems() + kv_head * layer.head_dim) * elem_bytes(layer.dtype);
}

inline int64_t slot_of(const SeqSpan& seq, int64_t block_size, int64_t pos) {
  const int64_t block_index = pos / block_size;
  CHECK_LT(block_index, seq.num_blocks) << "position " << pos << " beyond the block table";
  return static_cast<int64_t>(seq.block_table[block_index]) * block_size + pos % block_size;
}

}  // namespace

AttentionScratch::AttentionScratch(int num_threads, int64_t max_context, int64_t head_dim)
    : max_context_(max_context),
      scores_(num_threads, std::vector<float>(max_context)),
      accum_(num_threads, std::vector<float>(head_dim)) {}

void store_kv(const KvLayerView& layer, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens) {
  const int64_t n = layer.slot_elems();
  const int64_t num_slots = layer.num_blocks * layer.block_size;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    CHECK(slot >= 0 && slot < num_slots) << "slot " << slot << " of " << num_slots;
    if (layer.dtype == DType::kF32) {
      std::memcpy(static_cast<float*>(layer.k) + slot * n, k + t * n, n * sizeof(float));
      std::memcpy(static_cast<float*>(layer.v) + slot * n, v + t * n, n * sizeof(float));
    } else {
      uint16_t* kd = static_cast<uint16_t*>(layer.k) + slot * n;
      uint16_t* vd = static_cast<uint16_t*>(layer.v) + slot * n;
      for (int64_t i = 0; i < n; ++i) {
        kd[i] = fp32_to_fp16(k[t * n + i]);
        vd[i] = fp32_to_fp16(v[t * n + i]);
      }
    }
  }
}

void paged_attention(const KvLayerView& layer, const float* q, const int32_t* positions,
                     const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params, float* out,
                     ThreadPool& pool, AttentionScratch& scratch, Isa isa) {
  const int64_t hd = layer.head_dim;
  const int64_t n_head = params.n_head;
  CHECK_EQ(n_head % layer.n_kv_head, 0);
  const int64_t group = n_head / layer.n_kv_head;
  const VecOps& ops = vec_ops(isa);
  const auto* k_base = static_cast<const uint8_t*>(layer.k);
  const auto* v_base = static_cast<const uint8_t*>(layer.v);
  const bool f16 = layer.dtype == DType::kF16;
  (void)elem_bytes(layer.dtype);

  // Work items: (sequence row, query head), rows of all sequences flattened.
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n_rows = std::max(n_rows, seqs[s].token_begin + seqs[s].n_tokens);
  pool.parallel_for(n_rows * n_head, [&](int64_t begin, int64_t end, int thread) {
    float* scores = scratch.scores(thread);
    float* acc = scratch.accum(thread);
    int64_t s = 0;  // items are visited in row order, so the sequence index only moves forward
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_head;
      const int64_t h = item % n_head;
      // Sequences are sorted by token_begin: advance to the one holding row t.
      while (s + 1 < n_seqs && t >= seqs[s + 1].token_begin) ++s;
      CHECK(t >= seqs[s].token_begin && t < seqs[s].token_begin + seqs[s].n_tokens)
          << "batch row " << t << " belongs to no sequence";
      const SeqSpan& seq = seqs[s];
      const int64_t kv_head = h / group;
      const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
      CHECK_LE(n_ctx, scratch.max_context());
      const float* qh = q + (t * n_head + h) * hd;
      float max_score = -INFINITY;
      for (int64_t p = 0; p < n_ctx; ++p) {
        const size_t off = slot_offset(layer, slot_of(seq, layer.block_size, p), kv_head);
        const float dot = f16 ? ops.dot_f16(reinterpret_cast<const uint16_t*>(k_base + off), qh, hd)
                              : ops.dot_f32(reinterpret_cast<const float*>(k_base + off), qh, hd);
        scores[p] = dot * params.scale;
        max_score = std::max(max_score, scores[p]);
      }
      float sum = 0.0f;
      for (int64_t p = 0; p < n_ctx; ++p) {
        scores[p] = std::exp(scores[p] - max_score);
        sum += scores[p];
      }
      std::memset(acc, 0, hd * sizeof(float));
      const float inv = 1.0f / sum;
      for (int64_t p = 0; p < n_ctx; ++p) {
        const size_t off = slot_offset(layer, slot_of(seq, layer.block_size, p), kv_head);
        if (f16) {
          ops.axpy_f16(scores[p] * inv, reinterpret_cast<const uint16_t*>(v_base + off), acc, hd);
        } else {
          ops.axpy_f32(scores[p] * inv, reinterpret_cast<const float*>(v_base + off), acc, hd);
        }
      }
      std::memcpy(out + (t * n_head + h) * hd, acc, hd * sizeof(float));
    }
  });
}

void paged_attention_reference(const KvLayerView& layer, const float* q, const int32_t* positions,
                               const SeqSpan* seqs, int64_t n_seqs, const AttentionParams& params,
                               float* out) {
  const int64_t hd = layer.head_dim;
  const int64_t group = params.n_head / layer.n_kv_head;
  auto load = [&](const void* base, int64_t slot, int64_t kv_head, int64_t i) -> double {
    const int64_t index = slot * layer.slot_elems() + kv_head * hd + i;
    return layer.dtype == DType::kF32 ? static_cast<const float*>(base)[index]
                                      : fp16_to_fp32(static_cast<const uint16_t*>(base)[index]);
  };
  for (int64_t s = 0; s < n_seqs; ++s) {
    const SeqSpan& seq = seqs[s];
    for (int64_t t = seq.token_begin; t < seq.token_begin + seq.n_tokens; ++t) {
      const int64_t n_ctx = static_cast<int64_t>(positions[t]) + 1;
      for (int64_t h = 0; h < params.n_head; ++h) {
        const int64_t kv_head = h / group;
        const float* qh = q + (t * params.n_head + h) * hd;
        std::vector<double> w(n_ctx);
        double max_score = -INFINITY;
        for (int64_t p = 0; p < n_ctx; ++p) {
          const int64_t slot = slot_of(seq, layer.block_size, p);
          double dot = 0.0;
          for (int64_t i = 0; i < hd; ++i) dot += load(layer.k, slot, kv_head, i) * qh[i];
          w[p] = dot * params.scale;
          max_score = std::max(max_score, w[p]);
        }
        double sum = 0.0;
        for (double& x : w) sum += (x = std::exp(x - max_score));
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0.0;
          for (int64_t p = 0; p < n_ctx; ++p) acc += w[p] / sum * load(layer.v, slot_of(seq, layer.block_size, p), kv_head, i);
          out[(t * params.n_head + h) * hd + i] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace pagoda::kernels
