// BlockPool: owns all KV memory (allocated once), the ref count and the state of every block.
//
// Memory: one buffer; layer l holds K then V, each an array of num_blocks blocks of
// layout.k_block_bytes() (v_block_bytes()) bytes: a block is one contiguous run of bytes in
// its array, laid out as kernels/kv_format.h says.
//
// Block states (a block is in exactly one):
//
//   free ──allocate──▶ in use (ref ≥ 1) ──unref to 0, not cacheable──▶ free
//                        │  ▲
//     unref to 0,        │  │ reuse (a prefix hit)
//     cacheable          ▼  │
//                      cached (ref 0, hash kept by the prefix index, evictable)
//                        │
//                        └──evict (hash dropped)──▶ free
//
// `cacheable` is set by the block manager when it registers the block's hash in the prefix
// index (only full blocks whose KV is written); evict clears it. The pool knows nothing of
// hashes or policies: which cached block to evict is the block manager's choice.
// Invariants (check_integrity): free + cached + in use == num_blocks; the free list holds
// exactly the free blocks, each once; ref > 0 exactly for blocks in use; cached ⇒ cacheable.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "kernels/attention.h"
#include "kvcache/kv_layout.h"

namespace pagoda::kvcache {

enum class BlockState : uint8_t { kFree, kInUse, kCached };

class BlockPool {
 public:
  static Result<BlockPool> create(const KvLayout& layout, int64_t num_blocks);
  // The same states and ref counts with no KV memory (trace replay, sim/: geometry and costs
  // only, any number of blocks): layer_view and block_segments abort, copy_block does nothing.
  static Result<BlockPool> create_without_memory(const KvLayout& layout, int64_t num_blocks);
  bool has_memory() const { return !memory_.empty(); }

  const KvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t num_cached() const { return num_cached_; }
  int64_t num_in_use() const { return num_blocks() - num_free() - num_cached(); }

  // free -> in use (ref 1), the most recently freed block first; nullopt when none is free.
  std::optional<int32_t> allocate();
  void ref(int32_t block_id);      // in use -> in use, ref + 1
  // ref - 1; at 0 the block becomes cached if cacheable, else free. Returns the new state.
  BlockState unref(int32_t block_id);
  void reuse(int32_t block_id);    // cached -> in use (ref 1)
  void evict(int32_t block_id);    // cached -> free; clears cacheable
  // Marks an in-use block as holding registered KV: it will be cached, not freed, at ref 0.
  void set_cacheable(int32_t block_id);

  int32_t ref_count(int32_t block_id) const;
  BlockState state(int32_t block_id) const;
  bool cacheable(int32_t block_id) const;

  // The cache of one layer, as the kernels read and write it.
  kernels::KvLayerView layer_view(int64_t layer);

  // The bytes of one block in every layer, in BlockRecord payload order: out[2l] = layer l's K
  // block, out[2l + 1] = its V block (k_block_bytes / v_block_bytes each). out has 2 x n_layer
  // entries. The spans stay valid for the pool's life; who may touch them is the block's state.
  void block_segments(int32_t block_id, std::span<std::span<uint8_t>> out);

  // Copies block src onto block dst in every layer's K and V array (layout().k_block_bytes()
  // and v_block_bytes() each, so any KV format) and, for int4, its staged K rows.
  // Precondition: src != dst, both valid ids. Used for copy-on-write.
  void copy_block(int32_t src, int32_t dst);

  // Aborts if the free list, states and ref counts disagree.
  void check_integrity() const;

 private:
  BlockPool(const KvLayout& layout, AlignedBuffer memory, int64_t num_blocks);
  void check_id(int32_t block_id) const;

  KvLayout layout_;
  AlignedBuffer memory_;              // [n_layer][K,V][num_blocks, <one block of the KV format>]
  std::vector<int32_t> ref_counts_;   // [num_blocks]
  std::vector<BlockState> states_;    // [num_blocks]
  std::vector<char> cacheable_;       // [num_blocks] 1 while the prefix index holds the block
  std::vector<int32_t> free_list_;    // stack of free block ids (at start lowest id on top)
  int64_t num_cached_ = 0;
};

}  // namespace pagoda::kvcache
