// Internal to the kernels: addresses inside KV blocks (the layouts at the top of
// kernels/attention.h) and KvRowReader, which turns one block's rows into f32 rows for paged
// attention without copying the cache: f32 ND rows are read in place, every other format is
// decoded one row at a time into a head_dim scratch row.
#pragma once

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/kv_quant.h"
#include "kernels/kv_store.h"

namespace pagoda::kernels::detail {

inline bool kv_is_quantized(KvDType d) { return kv_dtype_is_quantized(d); }

// Bytes of one (token, head) row's codes, scales excluded.
inline int64_t kv_code_bytes(KvDType d, int64_t hd) {
  switch (d) {
    case KvDType::kF32: return 4 * hd;
    case KvDType::kF16:
    case KvDType::kBF16: return 2 * hd;
    case KvDType::kFp8E4M3:
    case KvDType::kFp8E5M2:
    case KvDType::kInt8: return hd;
    case KvDType::kInt4: return hd / 2;
  }
  return 0;
}

inline float load_f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Element offset of (token t, channel c) in an NZ block [n_kv_head*hd/16, B, 16].
inline int64_t nz_offset(int64_t block_size, int64_t t, int64_t c) { return ((c >> 4) * block_size + t) * 16 + (c & 15); }

// Calls f(i, c, run) for the runs of channels [c0, c0 + n) that are contiguous in NZ
// (each within one 16-channel group); i = c - c0.
template <typename F>
inline void for_each_nz_run(int64_t c0, int64_t n, F&& f) {
  for (int64_t c = c0; c < c0 + n;) {
    const int64_t run = std::min<int64_t>(16 - (c & 15), c0 + n - c);
    f(c - c0, c, run);
    c += run;
  }
}

// A prefetch the optimizer keeps: GCC 12 drops calls whose only effect is __builtin_prefetch
// (it treats them as pure), so attention's prefetches vanished at -O1 and above.
inline void prefetch_line(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

// Every cache line of [p, p + bytes).
inline void prefetch_bytes(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) prefetch_line(p + off);
}

// Geometry of one layer's K or V blocks.
struct KvGeom {
  KvDType dtype;
  bool nz;
  bool is_k;
  int64_t B, nkv, hd;
  int64_t block_bytes;
  int64_t stride;      // bytes from block b to b + 1 (KvLayerView::block_stride, else block_bytes)
  int64_t code_bytes;  // per (token, head) row
  uint8_t* base;

  KvGeom(const KvLayerView& l, bool k)
      : dtype(l.dtype), nz(l.layout == KvLayoutKind::kNZ), is_k(k), B(l.block_size), nkv(l.n_kv_head),
        hd(l.head_dim), block_bytes(k ? l.k_block_bytes() : l.v_block_bytes()),
        stride(l.block_stride > 0 ? l.block_stride : block_bytes), code_bytes(kv_code_bytes(l.dtype, l.head_dim)),
        base(static_cast<uint8_t*>(k ? l.k : l.v)) {}
  uint8_t* block(int64_t b) const { return base + b * stride; }
  // ND (and every quantized format): codes of row (t, h).
  int64_t row_offset(int64_t t, int64_t h) const { return (t * nkv + h) * code_bytes; }
  // Start of the f16 parameters after the codes:
  //   int8/fp8: scale [B, nkv]; int4 V: (scale, min) [B, nkv, 2]; int4 K: scale [nkv, hd], min [nkv, hd].
  int64_t params_offset() const { return B * nkv * code_bytes; }
  int64_t row_scale_offset(int64_t t, int64_t h) const { return params_offset() + 2 * (t * nkv + h); }
  int64_t row_scale_min_offset(int64_t t, int64_t h) const { return params_offset() + 4 * (t * nkv + h); }
  int64_t channel_scale_offset(int64_t h) const { return params_offset() + 2 * h * hd; }
  int64_t channel_min_offset(int64_t h) const { return params_offset() + 2 * (nkv + h) * hd; }
};

inline int64_t find_stage_slot(const KvStage& st, int64_t block) {
  for (int64_t s = 0; s < st.num_slots; ++s) {
    if (st.block_id[s] == block) return s;
  }
  return -1;
}

// Reads one kv head's rows of one block at a time as f32 rows of head_dim.
class KvRowReader {
 public:
  // row: [head_dim] scratch; params: [2, head_dim] scratch (int4 K channel scales and mins).
  KvRowReader(const KvLayerView& layer, bool is_k, const KvRowOps& dec, float* row, float* params)
      : layer_(layer), g_(layer, is_k), dec_(dec), row_(row), scale_(params), min_(params + layer.head_dim) {}

  // Selects `block`, which holds positions [first_pos, first_pos + B) of a sequence that has
  // seq_len tokens stored, for kv head h. A partial int4 K block is read from its stage slot.
  void begin_block(int32_t block, int64_t first_pos, int64_t seq_len, int64_t h) {
    block_ = g_.block(block);
    h_ = h;
    staged_ = nullptr;
    if (g_.dtype != KvDType::kInt4 || !g_.is_k) return;
    if (first_pos + g_.B > seq_len) {
      const int64_t s = find_stage_slot(layer_.stage, block);
      if (s >= 0) {
        CHECK_GE(layer_.stage.num_rows[s], seq_len - first_pos) << "stage of block " << block << " is short";
        staged_ = layer_.stage.k + (s * g_.B * g_.nkv + h) * g_.hd;
        return;
      }
    }
    dec_.f16(reinterpret_cast<const uint16_t*>(block_ + g_.channel_scale_offset(h)), scale_, g_.hd);
    dec_.f16(reinterpret_cast<const uint16_t*>(block_ + g_.channel_min_offset(h)), min_, g_.hd);
  }

  // Hints the caches at row t of `block` for the selected head: a head's rows are n_kv_head
  // rows apart (ND) or spread over 16-channel groups (NZ), and blocks are scattered, patterns
  // the hardware prefetchers follow poorly (measured: 3x at 4096 tokens, bench/kv_layout_bench).
  void prefetch(int32_t block, int64_t t) const {
    const uint8_t* blk = g_.block(block);
    if (g_.nz) {  // one chunk of up to 16 elements per 16-channel group
      const int64_t esize = g_.code_bytes / g_.hd;
      for_each_nz_run(h_ * g_.hd, g_.hd, [&](int64_t, int64_t c, int64_t) { prefetch_line(blk + nz_offset(g_.B, t, c) * esize); });
      return;
    }
    prefetch_bytes(blk + g_.row_offset(t, h_), g_.code_bytes);
  }

  // Row t decoded into dst [head_dim] instead of the reader's row; rows read in place (f32 ND,
  // staged int4 K) are returned where they are, dst untouched.
  const float* row(int64_t t, float* dst) {
    float* const keep = row_;
    row_ = dst;
    const float* r = row(t);
    row_ = keep;
    return r;
  }

  // Row t (token within the block) of the selected head: [head_dim] f32, valid until the next call.
  const float* row(int64_t t) {
    const int64_t hd = g_.hd;
    const uint8_t* codes = block_ + g_.row_offset(t, h_);
    switch (g_.dtype) {
      case KvDType::kF32:
        if (!g_.nz) return reinterpret_cast<const float*>(codes);
        for_each_nz_run(h_ * hd, hd, [&](int64_t i, int64_t c, int64_t run) {
          std::memcpy(row_ + i, block_ + nz_offset(g_.B, t, c) * 4, run * 4);
        });
        return row_;
      case KvDType::kF16:
      case KvDType::kBF16: {
        auto fn = g_.dtype == KvDType::kF16 ? dec_.f16 : dec_.bf16;
        if (!g_.nz) {
          fn(reinterpret_cast<const uint16_t*>(codes), row_, hd);
        } else {
          for_each_nz_run(h_ * hd, hd, [&](int64_t i, int64_t c, int64_t run) {
            fn(reinterpret_cast<const uint16_t*>(block_ + nz_offset(g_.B, t, c) * 2), row_ + i, run);
          });
        }
        return row_;
      }
      case KvDType::kInt8:
        dec_.int8(reinterpret_cast<const int8_t*>(codes), load_f16_at(block_ + g_.row_scale_offset(t, h_)), row_, hd);
        return row_;
      case KvDType::kFp8E4M3:
        dec_.e4m3(codes, load_f16_at(block_ + g_.row_scale_offset(t, h_)), row_, hd);
        return row_;
      case KvDType::kFp8E5M2:
        dec_.e5m2(codes, load_f16_at(block_ + g_.row_scale_offset(t, h_)), row_, hd);
        return row_;
      case KvDType::kInt4:
        if (g_.is_k) {
          if (staged_ != nullptr) return staged_ + t * g_.nkv * hd;
          dec_.int4_channels(codes, scale_, min_, row_, hd);
        } else {
          const int64_t off = g_.row_scale_min_offset(t, h_);
          dec_.int4_row(codes, load_f16_at(block_ + off), load_f16_at(block_ + off + 2), row_, hd);
        }
        return row_;
    }
    return row_;
  }

 private:
  const KvLayerView& layer_;
  KvGeom g_;
  const KvRowOps& dec_;
  float* row_;
  float* scale_;
  float* min_;
  const uint8_t* block_ = nullptr;
  int64_t h_ = 0;
  const float* staged_ = nullptr;  // int4 K: the selected head's row 0 in the stage, or null
};

}  // namespace pagoda::kernels::detail
