// The KV cache of one layer as the kernels see it (KvLayerView), writing rows into it
// (store_kv), the int4 K staging area, ND <-> NZ block conversion, and an owning buffer for
// tests and benchmarks. Block layouts of every format: the top of kernels/attention.h.
//
// int4 K staging. K's int4 scales are per channel over a block's B tokens, so they can only be
// fixed once the block is full. Until then the block's K rows live in f32 in a stage slot:
//   slot states: free (block_id -1) --first row of a block--> staging block b (rows [0, n))
//                --row B-1 stored--> quantized into block b, slot free again.
// Decided against re-quantizing the block on every store: each re-quantization rounds the
// already rounded rows again, so early rows drift by up to one step per store (B/2 steps
// worst case), breaking the (max-min)/30 bound; the stage keeps them exact until the block is
// full, and the partial block is read in full precision meanwhile (like KIVI's residual).
// Rules:
//  * Rows of a block are stored in order (row o after rows [0, o)); storing row o truncates the
//    slot to o + 1 rows (a truncated sequence may rewrite rows).
//  * Paged attention reads a sequence's last block from the stage when it is partial (the
//    sequence has fewer than a block's end of tokens) and a slot holds it; full blocks are
//    always read from their quantized form.
//  * Slots run out only when more partial blocks exist than slots (one per running sequence
//    is enough; slots of finished sequences are recycled). Then the least recently written
//    slot is flushed: its rows are quantized with the scales of the rows present, and when its
//    block grows again those rows are dequantized back into a slot. Each such round trip rounds
//    the rows present once more (at most half a step each time) -- with one slot per running
//    sequence it never happens; with too few it degrades to re-quantizing on every store, which
//    tests/kernels/attention_test.cpp (Int4StageOverflow) measures. Storing row o > 0 of a block
//    no slot holds does the same (after a truncation into a full block).
//  * Whoever fills a block's K other than through store_kv must tell the stage: a tier read
//    calls kv_stage_drop(layer, block), a copy-on-write kv_stage_copy(layer, src, dst);
//    else a stale slot could be mistaken for the block, or a partial block's rows missed.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "kernels/kv_format.h"
#include "kernels/matmul.h"

namespace pagoda::kernels {

// int4 K staging area of one layer (memory owned by the block pool or a KvLayerBuffer).
struct KvStage {
  int64_t num_slots = 0;
  float* k = nullptr;             // [num_slots, block_size, n_kv_head, head_dim]
  int32_t* block_id = nullptr;    // [num_slots] block staged in the slot; -1: free
  int32_t* num_rows = nullptr;    // [num_slots] rows [0, num_rows) of the slot hold data
  uint64_t* last_use = nullptr;   // [num_slots] *tick at the slot's last write
  uint64_t* tick = nullptr;       // [1] stores so far (LRU clock)
};

struct KvLayerView {
  void* k = nullptr;  // [num_blocks, kv_block_bytes_k] bytes; inside a block: attention.h
  void* v = nullptr;  // [num_blocks, kv_block_bytes_v] bytes
  KvDType dtype = KvDType::kF32;
  KvLayoutKind layout = KvLayoutKind::kND;  // kNZ: f32/f16/bf16, block_size % 16 == 0
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  KvStage stage;  // int4 only: partial K blocks in f32 (at least one slot)
  // K only (MLA's latent cache): each token's one K row holds both what keys and values are
  // computed from (kernels/mla_attention.h); there are no V blocks (v may be null, 0 bytes).
  bool k_only = false;
  // Bytes from one block of this layer's K (and V) to the next; 0: dense arrays (the block's
  // own bytes). Pages of layer groups (kvcache/kv_cache_spec.h) interleave several layers'
  // blocks, so their views stride by the page.
  int64_t block_stride = 0;

  int64_t slot_elems() const { return n_kv_head * head_dim; }
  int64_t k_block_bytes() const { return kv_block_bytes_k(dtype, head_dim, block_size, n_kv_head); }
  int64_t v_block_bytes() const { return k_only ? 0 : kv_block_bytes_v(dtype, head_dim, block_size, n_kv_head); }
};

// Writes new K/V rows into their slots. k, v: [n_tokens, n_kv_head * head_dim] f32 (v unused,
// may be null, for a K-only layer);
// slot_mapping: [n_tokens], each < num_blocks * block_size. Single-threaded (it updates the
// int4 stage). Quantized formats quantize each row here (int4 K: see the staging rules); f16
// and bf16 rows are encoded by `isa`'s KvRowOps (bit for bit the scalar conversions).
void store_kv(const KvLayerView& layer, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens, Isa isa = detect_isa());

// Rewrites K row `row` of `block` for every head from k: [n_kv_head * head_dim] f32, re-encoding
// it in the layer's format (rope_shift_k). Not int4 (its K scales span the whole block).
void store_k_row(const KvLayerView& layer, int32_t block, int64_t row, const float* k, Isa isa = detect_isa());

// Copies token row src_row of block src_block onto dst_row of dst_block, K and V of every head,
// byte for byte in the layer's format (codes and per-row scales; NZ channel groups): attention
// reads the same values from the new slot. Compaction of selected sequences (kvcache/kv_select.h).
// Not int4 (its K scales span the whole block).
void kv_copy_row(const KvLayerView& layer, int32_t src_block, int64_t src_row, int32_t dst_block, int64_t dst_row);

// Bytes of one layer's stage (0 unless int4), and binding a view of it onto `memory`
// (8-byte aligned, that many bytes). kv_stage_reset frees every slot (call once before use).
int64_t kv_stage_bytes(KvDType dtype, int64_t block_size, int64_t n_kv_head, int64_t head_dim, int64_t num_slots);
KvStage kv_stage_bind(void* memory, KvDType dtype, int64_t block_size, int64_t n_kv_head, int64_t head_dim,
                      int64_t num_slots);
void kv_stage_reset(const KvStage& stage);
// Forgets any staged rows of `block` (see the rules above). No-op unless int4.
void kv_stage_drop(const KvLayerView& layer, int32_t block);
// Copy-on-write of a block for int4: after the block bytes of src were copied onto dst, makes
// dst's staged K rows those of src (drops dst's slot; stages src's rows for dst if src is
// staged). No-op unless int4. Precondition: src != dst.
void kv_stage_copy(const KvLayerView& layer, int32_t src, int32_t dst);

// Scalar reference read of row `row` (token within the block) of block `block`, kv head
// `kv_head`: out[0..head_dim) dequantized from the block, or, for int4 K when `from_stage` and a
// slot holds the block, the staged f32 row. Element by element; no SIMD.
void kv_load_row_reference(const KvLayerView& layer, bool is_k, int32_t block, int64_t row, int64_t kv_head,
                           bool from_stage, float* out);

// ND <-> NZ for one block of an unquantized dtype: nd [B, n_kv_head, head_dim] <->
// nz [n_kv_head * head_dim / 16, B, 16] (B % 16 == 0, n_kv_head * head_dim % 16 == 0).
void kv_block_nd_to_nz(KvDType dtype, const void* nd, void* nz, int64_t block_size, int64_t n_kv_head,
                       int64_t head_dim);
void kv_block_nz_to_nd(KvDType dtype, const void* nz, void* nd, int64_t block_size, int64_t n_kv_head,
                       int64_t head_dim);

// One layer's K, V and stage memory with its view: for tests, benchmarks and tools that need a
// cache outside the block pool. Zero-filled; stage reset. k_only: no V memory (MLA latent).
class KvLayerBuffer {
 public:
  // block_stride > 0: each block at that stride (>= its bytes; KvLayerView::block_stride),
  // the bytes between blocks filled with 0xFF (NaN in every float format) so a stray read shows.
  KvLayerBuffer(KvDType dtype, KvLayoutKind layout, int64_t num_blocks, int64_t block_size, int64_t n_kv_head,
                int64_t head_dim, int64_t stage_slots = 8, bool k_only = false, int64_t block_stride = 0);
  KvLayerBuffer(const KvLayerBuffer&) = delete;
  KvLayerBuffer& operator=(const KvLayerBuffer&) = delete;
  const KvLayerView& view() const { return view_; }

 private:
  AlignedBuffer k_, v_, stage_;  // page-aligned (huge pages where the OS gives them), zeroed
  KvLayerView view_;
};

// Checks a view's geometry (CHECK: a broken view is a bug upstream of the kernels).
void check_kv_view(const KvLayerView& layer);

}  // namespace pagoda::kernels
