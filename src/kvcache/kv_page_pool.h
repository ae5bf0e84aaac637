// KvPagePool: the memory of a KV cache of layer groups (kv_cache_spec.h): num_pages pages of
// layout.page_bytes, allocated once, and per layer its int4 stage. It owns bytes only: which
// page holds what is KvCoordinator's business.
//
// Memory: [n_layer] int4 stages (empty for other formats), then [num_pages][page_bytes].
// Layer l's view: K at pages + k_offset(l), V at pages + v_offset(l), both with block stride
// page_bytes and num_blocks = num_pages, so a kernel's "block id" is a page id and a slot is
// page * block_size + position % block_size (KvCoordinator::slot). A shared layer (kShared)
// gets its source layer's view.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "kernels/kv_store.h"
#include "kvcache/kv_cache_spec.h"
#include "kvcache/kv_coordinator.h"

namespace pagoda::kvcache {

class KvPagePool {
 public:
  // Fails (a message naming the bytes) when the memory cannot be had; int4 K stages hold
  // stage_slots partial blocks per layer.
  static Result<KvPagePool> create(const KvCacheSpec& spec, const KvPageLayout& layout, int64_t num_pages,
                                   int64_t stage_slots = 8);

  int64_t num_pages() const { return num_pages_; }
  int64_t bytes() const { return static_cast<int64_t>(memory_.size()); }
  const kernels::KvLayerView& layer_view(int64_t layer) const { return views_[static_cast<size_t>(layer)]; }
  const std::vector<kernels::KvLayerView>& layer_views() const { return views_; }
  // A copy-on-write copy: every page of block c.src_block of c.group onto c.dst_block's (and
  // int4 stages). Before any KV is written into dst.
  void copy_block(const KvCoordinator& kv, const KvGroupCopy& c);

 private:
  KvPagePool(const KvCacheSpec& spec, const KvPageLayout& layout, AlignedBuffer memory, int64_t num_pages,
             int64_t stage_slots);
  KvCacheSpec spec_;
  KvPageLayout layout_;
  AlignedBuffer memory_;
  uint8_t* pages_ = nullptr;  // [num_pages, page_bytes], after the stages
  int64_t num_pages_ = 0;
  std::vector<kernels::KvLayerView> views_;  // [n_layer]
};

}  // namespace pagoda::kvcache
