#include "kvcache/block_pool.h"

#include <utility>

namespace pagoda::kvcache {

Result<BlockPool> BlockPool::create(const KvLayout& layout, int64_t num_blocks) {
  PAGODA_RETURN_IF_ERROR(layout.validate());
  if (num_blocks <= 0 || num_blocks > (int64_t{1} << 30)) {
    return Status::error("KV pool needs 1..2^30 blocks, got " + std::to_string(num_blocks));
  }
  const int64_t bytes = 2 * layout.n_layer * layout.layer_array_bytes(num_blocks);
  PAGODA_ASSIGN_OR_RETURN(AlignedBuffer memory, AlignedBuffer::allocate(static_cast<size_t>(bytes), /*prefault=*/true));
  return BlockPool(layout, std::move(memory), num_blocks);
}

BlockPool::BlockPool(const KvLayout& layout, AlignedBuffer memory, int64_t num_blocks)
    : layout_(layout), memory_(std::move(memory)), ref_counts_(num_blocks, 0) {
  free_list_.reserve(num_blocks);
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_list_.push_back(static_cast<int32_t>(i));
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_list_.empty()) return std::nullopt;
  const int32_t id = free_list_.back();
  free_list_.pop_back();
  CHECK_EQ(ref_counts_[id], 0) << "block " << id << " on the free list while in use";
  ref_counts_[id] = 1;
  return id;
}

void BlockPool::ref(int32_t block_id) {
  CHECK(block_id >= 0 && block_id < num_blocks()) << "block " << block_id;
  CHECK_GT(ref_counts_[block_id], 0) << "ref of free block " << block_id;
  ++ref_counts_[block_id];
}

void BlockPool::unref(int32_t block_id) {
  CHECK(block_id >= 0 && block_id < num_blocks()) << "block " << block_id;
  CHECK_GT(ref_counts_[block_id], 0) << "block " << block_id << " released twice";
  if (--ref_counts_[block_id] == 0) free_list_.push_back(block_id);
}

int32_t BlockPool::ref_count(int32_t block_id) const {
  CHECK(block_id >= 0 && block_id < num_blocks()) << "block " << block_id;
  return ref_counts_[block_id];
}

kernels::KvLayerView BlockPool::layer_view(int64_t layer) {
  CHECK(layer >= 0 && layer < layout_.n_layer) << "layer " << layer;
  const int64_t array_bytes = layout_.layer_array_bytes(num_blocks());
  kernels::KvLayerView view;
  view.k = memory_.data() + 2 * layer * array_bytes;
  view.v = memory_.data() + (2 * layer + 1) * array_bytes;
  view.dtype = layout_.dtype;
  view.num_blocks = num_blocks();
  view.block_size = layout_.block_size;
  view.n_kv_head = layout_.n_kv_head;
  view.head_dim = layout_.head_dim;
  return view;
}

void BlockPool::check_integrity() const {
  std::vector<char> on_free_list(ref_counts_.size(), 0);
  for (int32_t id : free_list_) {
    CHECK(id >= 0 && id < num_blocks()) << "free list holds block " << id;
    CHECK(!on_free_list[id]) << "block " << id << " twice on the free list";
    CHECK_EQ(ref_counts_[id], 0) << "free block " << id << " has references";
    on_free_list[id] = 1;
  }
  for (int64_t id = 0; id < num_blocks(); ++id) {
    CHECK(on_free_list[id] || ref_counts_[id] > 0) << "block " << id << " is neither free nor in use";
  }
}

}  // namespace pagoda::kvcache
