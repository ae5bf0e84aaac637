#include "kernels/kv_store.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/kv_block.h"
#include "kernels/kv_quant.h"

namespace pagoda::kernels {

using detail::KvGeom;

namespace {

int64_t plain_elem_bytes(KvDType dtype) {
  CHECK(dtype == KvDType::kF32 || dtype == KvDType::kF16 || dtype == KvDType::kBF16)
      << "KV dtype " << kv_dtype_name(dtype) << " has no plain elements";
  return dtype == KvDType::kF32 ? 4 : 2;
}

inline float load_plain(KvDType dtype, const uint8_t* p) {
  if (dtype == KvDType::kF32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == KvDType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

inline void store_u16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// Writes row `t` of `block` for every head from x: [n_kv_head * head_dim] f32. Not int4 K.
// f16 / bf16 rows through ops' encoders (ND: one run; NZ: a run per 16-channel group).
void store_rows(const KvGeom& g, int64_t block, int64_t t, const float* x, const KvRowOps& ops) {
  uint8_t* blk = g.block(block);
  const int64_t n = g.nkv * g.hd;
  switch (g.dtype) {
    case KvDType::kF32: {
      auto* rows = reinterpret_cast<float*>(blk);
      if (!g.nz) {
        std::memcpy(rows + t * n, x, n * sizeof(float));
        return;
      }
      detail::for_each_nz_run(0, n, [&](int64_t i, int64_t c, int64_t run) {
        std::memcpy(rows + detail::nz_offset(g.B, t, c), x + i, run * sizeof(float));
      });
      return;
    }
    case KvDType::kF16:
    case KvDType::kBF16: {
      auto enc = g.dtype == KvDType::kF16 ? ops.enc_f16 : ops.enc_bf16;
      auto* codes = reinterpret_cast<uint16_t*>(blk);
      if (!g.nz) {
        enc(x, codes + t * n, n);
        return;
      }
      detail::for_each_nz_run(0, n, [&](int64_t i, int64_t c, int64_t run) { enc(x + i, codes + detail::nz_offset(g.B, t, c), run); });
      return;
    }
    case KvDType::kInt8:
    case KvDType::kFp8E4M3:
    case KvDType::kFp8E5M2:
      for (int64_t h = 0; h < g.nkv; ++h) {
        uint16_t s;
        uint8_t* codes = blk + g.row_offset(t, h);
        if (g.dtype == KvDType::kInt8) {
          quantize_row_int8(x + h * g.hd, g.hd, reinterpret_cast<int8_t*>(codes), &s);
        } else {
          quantize_row_fp8(g.dtype, x + h * g.hd, g.hd, codes, &s);
        }
        store_u16(blk + g.row_scale_offset(t, h), s);
      }
      return;
    case KvDType::kInt4:
      CHECK(!g.is_k) << "int4 K goes through the stage";
      for (int64_t h = 0; h < g.nkv; ++h) {
        uint16_t s, m;
        quantize_row_int4(x + h * g.hd, g.hd, blk + g.row_offset(t, h), &s, &m);
        store_u16(blk + g.row_scale_min_offset(t, h), s);
        store_u16(blk + g.row_scale_min_offset(t, h) + 2, m);
      }
      return;
  }
}

// Quantizes rows [0, n_rows) of an int4 K block from f32 rows [n_rows, n_kv_head, head_dim].
void quantize_k_block(const KvGeom& g, int64_t block, const float* rows, int64_t n_rows) {
  uint8_t* blk = g.block(block);
  for (int64_t h = 0; h < g.nkv; ++h) {
    quantize_channels_int4(rows + h * g.hd, n_rows, g.nkv * g.hd, g.hd, blk + g.row_offset(0, h), g.nkv * g.code_bytes,
                           reinterpret_cast<uint16_t*>(blk + g.channel_scale_offset(h)),
                           reinterpret_cast<uint16_t*>(blk + g.channel_min_offset(h)));
  }
}

// A free slot, or the least recently written one after flushing its rows into its block.
int64_t acquire_stage_slot(const KvLayerView& layer, const KvGeom& g) {
  const KvStage& st = layer.stage;
  int64_t victim = 0;
  for (int64_t s = 0; s < st.num_slots; ++s) {
    if (st.block_id[s] < 0) return s;
    if (st.last_use[s] < st.last_use[victim]) victim = s;
  }
  const int64_t slot_elems = g.B * g.nkv * g.hd;
  quantize_k_block(g, st.block_id[victim], st.k + victim * slot_elems, st.num_rows[victim]);
  st.block_id[victim] = -1;
  st.num_rows[victim] = 0;
  return victim;
}

// int4 K: row t of `block` into its stage slot; quantizes the block when t is its last row.
void stage_store_k(const KvLayerView& layer, const KvGeom& g, int64_t block, int64_t t, const float* x) {
  const KvStage& st = layer.stage;
  const int64_t row_elems = g.nkv * g.hd;
  int64_t s = detail::find_stage_slot(st, block);
  if (s < 0) {
    s = acquire_stage_slot(layer, g);
    st.block_id[s] = static_cast<int32_t>(block);
    // Rows [0, t) exist only in quantized form (flushed, or a truncation into a full block).
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t h = 0; h < g.nkv; ++h) {
        kv_load_row_reference(layer, true, static_cast<int32_t>(block), r, h, false,
                              st.k + (s * g.B + r) * row_elems + h * g.hd);
      }
    }
  }
  std::memcpy(st.k + (s * g.B + t) * row_elems, x, row_elems * sizeof(float));
  st.num_rows[s] = static_cast<int32_t>(t + 1);
  st.last_use[s] = ++*st.tick;
  if (t == g.B - 1) {
    quantize_k_block(g, block, st.k + s * g.B * row_elems, g.B);
    st.block_id[s] = -1;
    st.num_rows[s] = 0;
  }
}

int64_t stage_header_bytes(int64_t num_slots) { return (8 + 16 * num_slots + 63) / 64 * 64; }

}  // namespace

void check_kv_view(const KvLayerView& l) {
  CHECK(l.block_size > 0 && l.n_kv_head > 0 && l.head_dim > 0 && l.num_blocks >= 0) << "bad KV view geometry";
  CHECK(l.num_blocks == 0 || (l.k != nullptr && (l.k_only || l.v != nullptr))) << "KV view without memory";
  if (l.layout == KvLayoutKind::kNZ) {
    CHECK(!detail::kv_is_quantized(l.dtype)) << "NZ layout with KV dtype " << kv_dtype_name(l.dtype);
    CHECK(l.block_size % 16 == 0 && l.slot_elems() % 16 == 0) << "NZ needs block_size and n_kv_head*head_dim multiples of 16";
  }
  if (l.dtype == KvDType::kInt4) {
    CHECK(l.head_dim % 2 == 0) << "int4 KV needs an even head_dim";
    CHECK(l.stage.num_slots >= 1 && l.stage.k != nullptr) << "int4 KV view without a stage";
  }
}

void store_kv(const KvLayerView& layer, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens, Isa isa) {
  check_kv_view(layer);
  const KvRowOps& ops = kv_row_ops(isa);
  const KvGeom gk(layer, true), gv(layer, false);
  const int64_t n = layer.slot_elems();
  const int64_t num_slots = layer.num_blocks * layer.block_size;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    CHECK(slot >= 0 && slot < num_slots) << "slot " << slot << " of " << num_slots;
    const int64_t block = slot / layer.block_size, row = slot % layer.block_size;
    if (layer.dtype == KvDType::kInt4) {
      stage_store_k(layer, gk, block, row, k + t * n);
    } else {
      store_rows(gk, block, row, k + t * n, ops);
    }
    if (!layer.k_only) store_rows(gv, block, row, v + t * n, ops);
  }
}

void kv_copy_row(const KvLayerView& layer, int32_t src_block, int64_t src_row, int32_t dst_block, int64_t dst_row) {
  CHECK(layer.dtype != KvDType::kInt4) << "kv_copy_row on int4 KV";
  CHECK(src_block >= 0 && src_block < layer.num_blocks && dst_block >= 0 && dst_block < layer.num_blocks);
  CHECK(src_row >= 0 && src_row < layer.block_size && dst_row >= 0 && dst_row < layer.block_size);
  for (int kv = 0; kv < (layer.k_only ? 1 : 2); ++kv) {
    const KvGeom g(layer, kv == 0);
    const uint8_t* src = g.block(src_block);
    uint8_t* dst = g.block(dst_block);
    const int64_t n = g.nkv * g.hd;
    if (g.nz) {
      const int64_t e = g.code_bytes / g.hd;
      for (int64_t c = 0; c < n; c += 16) {
        std::memmove(dst + detail::nz_offset(g.B, dst_row, c) * e, src + detail::nz_offset(g.B, src_row, c) * e, 16 * e);
      }
      continue;
    }
    std::memmove(dst + g.row_offset(dst_row, 0), src + g.row_offset(src_row, 0), g.nkv * g.code_bytes);
    if (kv_dtype_is_quantized(g.dtype)) {
      std::memmove(dst + g.row_scale_offset(dst_row, 0), src + g.row_scale_offset(src_row, 0), 2 * g.nkv);
    }
  }
}

void store_k_row(const KvLayerView& layer, int32_t block, int64_t row, const float* k, Isa isa) {
  CHECK(layer.dtype != KvDType::kInt4) << "store_k_row: int4 K is quantized per block";
  CHECK(block >= 0 && block < layer.num_blocks && row >= 0 && row < layer.block_size);
  store_rows(KvGeom(layer, true), block, row, k, kv_row_ops(isa));
}

int64_t kv_stage_bytes(KvDType dtype, int64_t block_size, int64_t n_kv_head, int64_t head_dim, int64_t num_slots) {
  if (dtype != KvDType::kInt4 || num_slots <= 0) return 0;
  return stage_header_bytes(num_slots) + 4 * num_slots * block_size * n_kv_head * head_dim;
}

KvStage kv_stage_bind(void* memory, KvDType dtype, int64_t block_size, int64_t n_kv_head, int64_t head_dim,
                      int64_t num_slots) {
  KvStage st;
  if (kv_stage_bytes(dtype, block_size, n_kv_head, head_dim, num_slots) == 0) return st;
  CHECK(memory != nullptr && reinterpret_cast<uintptr_t>(memory) % 8 == 0) << "stage memory must be 8-byte aligned";
  auto* p = static_cast<uint8_t*>(memory);
  st.num_slots = num_slots;
  st.tick = reinterpret_cast<uint64_t*>(p);
  st.last_use = reinterpret_cast<uint64_t*>(p + 8);
  st.block_id = reinterpret_cast<int32_t*>(p + 8 + 8 * num_slots);
  st.num_rows = reinterpret_cast<int32_t*>(p + 8 + 12 * num_slots);
  st.k = reinterpret_cast<float*>(p + stage_header_bytes(num_slots));
  return st;
}

void kv_stage_reset(const KvStage& st) {
  if (st.num_slots == 0) return;
  *st.tick = 0;
  for (int64_t s = 0; s < st.num_slots; ++s) {
    st.block_id[s] = -1;
    st.num_rows[s] = 0;
    st.last_use[s] = 0;
  }
}

void kv_stage_drop(const KvLayerView& layer, int32_t block) {
  if (layer.dtype != KvDType::kInt4) return;
  const int64_t s = detail::find_stage_slot(layer.stage, block);
  if (s >= 0) {
    layer.stage.block_id[s] = -1;
    layer.stage.num_rows[s] = 0;
  }
}

void kv_stage_copy(const KvLayerView& layer, int32_t src, int32_t dst) {
  if (layer.dtype != KvDType::kInt4) return;
  CHECK(src != dst) << "stage copy of block " << src << " onto itself";
  kv_stage_drop(layer, dst);
  const KvStage& st = layer.stage;
  if (detail::find_stage_slot(st, src) < 0) return;
  const KvGeom g(layer, true);
  const int64_t s_dst = acquire_stage_slot(layer, g);
  const int64_t s_src = detail::find_stage_slot(st, src);
  if (s_src < 0) {
    // src's slot was the one flushed to make room: its rows are now quantized in src's block.
    std::memcpy(g.block(dst), g.block(src), static_cast<size_t>(g.block_bytes));
    return;
  }
  const int64_t slot_elems = g.B * g.nkv * g.hd;
  st.block_id[s_dst] = dst;
  st.num_rows[s_dst] = st.num_rows[s_src];
  st.last_use[s_dst] = ++*st.tick;
  std::memcpy(st.k + s_dst * slot_elems, st.k + s_src * slot_elems, st.num_rows[s_src] * g.nkv * g.hd * sizeof(float));
}

void kv_load_row_reference(const KvLayerView& layer, bool is_k, int32_t block, int64_t row, int64_t kv_head,
                           bool from_stage, float* out) {
  CHECK(is_k || !layer.k_only) << "a K-only (latent) layer has no V rows";
  const KvGeom g(layer, is_k);
  const uint8_t* blk = g.block(block);
  const int64_t hd = g.hd;
  if (g.dtype == KvDType::kInt4 && is_k && from_stage) {
    const int64_t s = detail::find_stage_slot(layer.stage, block);
    if (s >= 0) {
      CHECK_LT(row, layer.stage.num_rows[s]) << "row " << row << " of staged block " << block;
      std::memcpy(out, layer.stage.k + ((s * g.B + row) * g.nkv + kv_head) * hd, hd * sizeof(float));
      return;
    }
  }
  const uint8_t* codes = blk + g.row_offset(row, kv_head);
  for (int64_t i = 0; i < hd; ++i) {
    switch (g.dtype) {
      case KvDType::kF32:
      case KvDType::kF16:
      case KvDType::kBF16: {
        const int64_t c = kv_head * hd + i;
        const int64_t off = g.nz ? detail::nz_offset(g.B, row, c) : row * g.nkv * hd + c;
        out[i] = load_plain(g.dtype, blk + off * plain_elem_bytes(g.dtype));
        break;
      }
      case KvDType::kInt8:
        out[i] = detail::load_f16_at(blk + g.row_scale_offset(row, kv_head)) * static_cast<float>(static_cast<int8_t>(codes[i]));
        break;
      case KvDType::kFp8E4M3:
        out[i] = detail::load_f16_at(blk + g.row_scale_offset(row, kv_head)) * e4m3_to_fp32(codes[i]);
        break;
      case KvDType::kFp8E5M2:
        out[i] = detail::load_f16_at(blk + g.row_scale_offset(row, kv_head)) * e5m2_to_fp32(codes[i]);
        break;
      case KvDType::kInt4: {
        const int64_t half = hd / 2;
        const float c = static_cast<float>(i < half ? codes[i] & 15 : codes[i - half] >> 4);
        float s, m;
        if (is_k) {
          s = detail::load_f16_at(blk + g.channel_scale_offset(kv_head) + 2 * i);
          m = detail::load_f16_at(blk + g.channel_min_offset(kv_head) + 2 * i);
        } else {
          s = detail::load_f16_at(blk + g.row_scale_min_offset(row, kv_head));
          m = detail::load_f16_at(blk + g.row_scale_min_offset(row, kv_head) + 2);
        }
        out[i] = s * c + m;
        break;
      }
    }
  }
}

void kv_block_nd_to_nz(KvDType dtype, const void* nd, void* nz, int64_t block_size, int64_t n_kv_head, int64_t head_dim) {
  const int64_t e = plain_elem_bytes(dtype), n = n_kv_head * head_dim;
  CHECK(block_size % 16 == 0 && n % 16 == 0) << "NZ needs multiples of 16";
  for (int64_t t = 0; t < block_size; ++t) {
    for (int64_t c = 0; c < n; ++c) {
      std::memcpy(static_cast<uint8_t*>(nz) + detail::nz_offset(block_size, t, c) * e,
                  static_cast<const uint8_t*>(nd) + (t * n + c) * e, e);
    }
  }
}

void kv_block_nz_to_nd(KvDType dtype, const void* nz, void* nd, int64_t block_size, int64_t n_kv_head, int64_t head_dim) {
  const int64_t e = plain_elem_bytes(dtype), n = n_kv_head * head_dim;
  CHECK(block_size % 16 == 0 && n % 16 == 0) << "NZ needs multiples of 16";
  for (int64_t t = 0; t < block_size; ++t) {
    for (int64_t c = 0; c < n; ++c) {
      std::memcpy(static_cast<uint8_t*>(nd) + (t * n + c) * e,
                  static_cast<const uint8_t*>(nz) + detail::nz_offset(block_size, t, c) * e, e);
    }
  }
}

KvLayerBuffer::KvLayerBuffer(KvDType dtype, KvLayoutKind layout, int64_t num_blocks, int64_t block_size,
                             int64_t n_kv_head, int64_t head_dim, int64_t stage_slots, bool k_only,
                             int64_t block_stride) {
  view_.k_only = k_only;
  view_.dtype = dtype;
  view_.layout = layout;
  view_.num_blocks = num_blocks;
  view_.block_size = block_size;
  view_.n_kv_head = n_kv_head;
  view_.head_dim = head_dim;
  auto allocate = [](int64_t bytes) {
    auto buffer = AlignedBuffer::allocate(static_cast<size_t>(std::max<int64_t>(bytes, 8)));
    CHECK(buffer.is_ok()) << buffer.status().message();
    return std::move(buffer).value();
  };
  CHECK(block_stride == 0 || block_stride >= std::max(view_.k_block_bytes(), view_.v_block_bytes()));
  view_.block_stride = block_stride;
  k_ = allocate(num_blocks * (block_stride > 0 ? block_stride : view_.k_block_bytes()));
  v_ = allocate(num_blocks * (block_stride > 0 ? block_stride : view_.v_block_bytes()));
  if (block_stride > 0) {
    std::memset(k_.data(), 0xFF, static_cast<size_t>(num_blocks * block_stride));
    std::memset(v_.data(), 0xFF, static_cast<size_t>(num_blocks * block_stride));
  }
  stage_ = allocate(kv_stage_bytes(dtype, block_size, n_kv_head, head_dim, stage_slots));
  view_.k = k_.data();
  view_.v = v_.data();
  view_.stage = kv_stage_bind(stage_.data(), dtype, block_size, n_kv_head, head_dim, stage_slots);
  kv_stage_reset(view_.stage);
  check_kv_view(view_);
}

}  // namespace pagoda::kernels
