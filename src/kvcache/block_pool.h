// BlockPool: owns all KV memory (allocated once) and the ref count of every block.
//
// Memory: one buffer; layer l holds K then V, each [num_blocks, block_size, n_kv_head, head_dim]
// of layout.dtype.
//
// Block states:  free (ref 0, on the free list) --allocate--> in use (ref >= 1)
//                in use --unref to 0--> free.
// (Prefix caching will add "cached: ref 0, hash kept, evictable" between them.)
// Invariant: free list + in use == num_blocks; no block is on the free list twice.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "kernels/attention.h"
#include "kvcache/kv_layout.h"

namespace pagoda::kvcache {

class BlockPool {
 public:
  static Result<BlockPool> create(const KvLayout& layout, int64_t num_blocks);

  const KvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t num_in_use() const { return num_blocks() - num_free(); }

  // Takes a free block (ref 1), or nullopt when none is free.
  std::optional<int32_t> allocate();
  void ref(int32_t block_id);    // block must be in use
  void unref(int32_t block_id);  // back to free at ref 0
  int32_t ref_count(int32_t block_id) const;

  // The cache of one layer, as the kernels read and write it.
  kernels::KvLayerView layer_view(int64_t layer);

  // Aborts if the free list and ref counts disagree.
  void check_integrity() const;

 private:
  BlockPool(const KvLayout& layout, AlignedBuffer memory, int64_t num_blocks);
  KvLayout layout_;
  AlignedBuffer memory_;              // [n_layer][K,V][num_blocks, block_size, n_kv_head, head_dim]
  std::vector<int32_t> ref_counts_;   // [num_blocks]
  std::vector<int32_t> free_list_;    // stack of free block ids, lowest id on top
};

}  // namespace pagoda::kvcache
