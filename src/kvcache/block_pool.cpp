#include "kvcache/block_pool.h"

#include <cstring>
#include <utility>

#include "kernels/kv_store.h"

namespace pagoda::kvcache {

Result<BlockPool> BlockPool::create(const KvLayout& layout, int64_t num_blocks) {
  PAGODA_RETURN_IF_ERROR(layout.validate());
  if (num_blocks <= 0 || num_blocks > (int64_t{1} << 30)) {
    return Status::error("KV pool needs 1..2^30 blocks, got " + std::to_string(num_blocks));
  }
  // [n_layer] int4 stages (empty otherwise), then [n_layer][K array, V array] back to back;
  // every size comes from the storage contract (kernels/kv_format.h) and is a multiple of 8.
  const int64_t stage_bytes = layout.stage_bytes();
  const int64_t bytes = stage_bytes + layout.n_layer * (layout.k_array_bytes(num_blocks) + layout.v_array_bytes(num_blocks));
  PAGODA_ASSIGN_OR_RETURN(AlignedBuffer memory, AlignedBuffer::allocate(static_cast<size_t>(bytes), /*prefault=*/true));
  for (int64_t l = 0; l < layout.n_layer; ++l) {
    kernels::kv_stage_reset(kernels::kv_stage_bind(memory.data() + l * layout.layer_stage_bytes(), layout.dtype,
                                                   layout.block_size, layout.n_kv_head, layout.head_dim,
                                                   layout.stage_slots));
  }
  return BlockPool(layout, std::move(memory), num_blocks);
}

Result<BlockPool> BlockPool::create_without_memory(const KvLayout& layout, int64_t num_blocks) {
  PAGODA_RETURN_IF_ERROR(layout.validate());
  if (num_blocks <= 0 || num_blocks > (int64_t{1} << 30)) {
    return Status::error("KV pool needs 1..2^30 blocks, got " + std::to_string(num_blocks));
  }
  return BlockPool(layout, AlignedBuffer(), num_blocks);
}

BlockPool::BlockPool(const KvLayout& layout, AlignedBuffer memory, int64_t num_blocks)
    : layout_(layout),
      memory_(std::move(memory)),
      ref_counts_(num_blocks, 0),
      states_(num_blocks, BlockState::kFree),
      cacheable_(num_blocks, 0) {
  free_list_.reserve(num_blocks);
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_list_.push_back(static_cast<int32_t>(i));
}

void BlockPool::check_id(int32_t block_id) const {
  CHECK(block_id >= 0 && block_id < num_blocks()) << "block " << block_id;
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_list_.empty()) return std::nullopt;
  const int32_t id = free_list_.back();
  free_list_.pop_back();
  CHECK(states_[id] == BlockState::kFree && ref_counts_[id] == 0) << "block " << id << " on the free list while not free";
  ref_counts_[id] = 1;
  states_[id] = BlockState::kInUse;
  return id;
}

void BlockPool::ref(int32_t block_id) {
  check_id(block_id);
  CHECK(states_[block_id] == BlockState::kInUse) << "ref of block " << block_id << " that is not in use";
  ++ref_counts_[block_id];
}

BlockState BlockPool::unref(int32_t block_id) {
  check_id(block_id);
  CHECK_GT(ref_counts_[block_id], 0) << "block " << block_id << " released twice";
  if (--ref_counts_[block_id] > 0) return BlockState::kInUse;
  if (cacheable_[block_id]) {
    states_[block_id] = BlockState::kCached;
    ++num_cached_;
  } else {
    states_[block_id] = BlockState::kFree;
    free_list_.push_back(block_id);
  }
  return states_[block_id];
}

void BlockPool::reuse(int32_t block_id) {
  check_id(block_id);
  CHECK(states_[block_id] == BlockState::kCached) << "reuse of block " << block_id << " that is not cached";
  states_[block_id] = BlockState::kInUse;
  ref_counts_[block_id] = 1;
  --num_cached_;
}

void BlockPool::evict(int32_t block_id) {
  check_id(block_id);
  CHECK(states_[block_id] == BlockState::kCached) << "evict of block " << block_id << " that is not cached";
  states_[block_id] = BlockState::kFree;
  cacheable_[block_id] = 0;
  --num_cached_;
  free_list_.push_back(block_id);
}

void BlockPool::set_cacheable(int32_t block_id) {
  check_id(block_id);
  CHECK(states_[block_id] == BlockState::kInUse) << "only a block in use can be registered, not " << block_id;
  cacheable_[block_id] = 1;
}

int32_t BlockPool::ref_count(int32_t block_id) const {
  check_id(block_id);
  return ref_counts_[block_id];
}

BlockState BlockPool::state(int32_t block_id) const {
  check_id(block_id);
  return states_[block_id];
}

bool BlockPool::cacheable(int32_t block_id) const {
  check_id(block_id);
  return cacheable_[block_id] != 0;
}

kernels::KvLayerView BlockPool::layer_view(int64_t layer) {
  CHECK(layer >= 0 && layer < layout_.n_layer) << "layer " << layer;
  CHECK(has_memory()) << "a pool created without memory has no KV to view";
  const int64_t k_bytes = layout_.k_array_bytes(num_blocks()), v_bytes = layout_.v_array_bytes(num_blocks());
  uint8_t* const arrays = memory_.data() + layout_.stage_bytes();  // after the stages (see create)
  kernels::KvLayerView view;
  view.k = arrays + layer * (k_bytes + v_bytes);
  view.v = arrays + layer * (k_bytes + v_bytes) + k_bytes;
  view.dtype = layout_.dtype;
  view.layout = layout_.layout;
  view.num_blocks = num_blocks();
  view.block_size = layout_.block_size;
  view.n_kv_head = layout_.n_kv_head;
  view.head_dim = layout_.head_dim;
  view.k_only = layout_.k_only;
  view.stage = kernels::kv_stage_bind(memory_.data() + layer * layout_.layer_stage_bytes(), layout_.dtype,
                                      layout_.block_size, layout_.n_kv_head, layout_.head_dim, layout_.stage_slots);
  return view;
}

void BlockPool::block_segments(int32_t block_id, std::span<std::span<uint8_t>> out) {
  check_id(block_id);
  CHECK_EQ(static_cast<int64_t>(out.size()), 2 * layout_.n_layer);
  const size_t k_bytes = static_cast<size_t>(layout_.k_block_bytes());
  const size_t v_bytes = static_cast<size_t>(layout_.v_block_bytes());
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    const kernels::KvLayerView view = layer_view(l);
    out[2 * l] = {static_cast<uint8_t*>(view.k) + block_id * k_bytes, k_bytes};
    out[2 * l + 1] = {static_cast<uint8_t*>(view.v) + block_id * v_bytes, v_bytes};
  }
}

void BlockPool::copy_block(int32_t src, int32_t dst) {
  check_id(src);
  check_id(dst);
  CHECK(src != dst) << "copy of block " << src << " onto itself";
  if (!has_memory()) return;  // create_without_memory: states only
  // Sizes come from the KV format (kernels/kv_format.h): a block is one contiguous run of
  // k_block_bytes (v_block_bytes) in each layer's K (V) array, whatever the dtype or layout.
  const int64_t k_bytes = layout_.k_block_bytes();
  const int64_t v_bytes = layout_.v_block_bytes();
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    const kernels::KvLayerView view = layer_view(l);
    auto* const k = static_cast<uint8_t*>(view.k);
    auto* const v = static_cast<uint8_t*>(view.v);
    std::memcpy(k + dst * k_bytes, k + src * k_bytes, static_cast<size_t>(k_bytes));
    std::memcpy(v + dst * v_bytes, v + src * v_bytes, static_cast<size_t>(v_bytes));
    kernels::kv_stage_copy(view, src, dst);  // int4: a partial block's K rows live in the stage
  }
}

void BlockPool::check_integrity() const {
  std::vector<char> on_free_list(ref_counts_.size(), 0);
  for (int32_t id : free_list_) {
    CHECK(id >= 0 && id < num_blocks()) << "free list holds block " << id;
    CHECK(!on_free_list[id]) << "block " << id << " twice on the free list";
    on_free_list[id] = 1;
  }
  int64_t free = 0, cached = 0, in_use = 0;
  for (int32_t id = 0; id < num_blocks(); ++id) {
    switch (states_[id]) {
      case BlockState::kFree:
        ++free;
        CHECK(on_free_list[id]) << "free block " << id << " missing from the free list";
        CHECK(ref_counts_[id] == 0 && !cacheable_[id]) << "free block " << id << " has references or a hash";
        break;
      case BlockState::kCached:
        ++cached;
        CHECK(!on_free_list[id]) << "cached block " << id << " on the free list";
        CHECK(ref_counts_[id] == 0 && cacheable_[id]) << "cached block " << id << " has references or no hash";
        break;
      case BlockState::kInUse:
        ++in_use;
        CHECK(!on_free_list[id]) << "block " << id << " in use and on the free list";
        CHECK_GT(ref_counts_[id], 0) << "block " << id << " in use without references";
        break;
    }
  }
  CHECK_EQ(free, num_free()) << "free list length";
  CHECK_EQ(cached, num_cached_) << "cached count";
  CHECK_EQ(free + cached + in_use, num_blocks());
}

}  // namespace pagoda::kvcache
