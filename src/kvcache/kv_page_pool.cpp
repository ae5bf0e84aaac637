#include "kvcache/kv_page_pool.h"

#include <cstring>
#include <string>

#include "core/check.h"

namespace pagoda::kvcache {
namespace {

int64_t stage_bytes_of(const KvLayerSpec& l, int64_t block_size, int64_t slots) {
  if (l.kind == KvGroupKind::kShared) return 0;
  const int64_t bytes = kernels::kv_stage_bytes(l.dtype, block_size, l.n_kv_head, l.head_dim, slots);
  return (bytes + 63) / 64 * 64;
}

}  // namespace

Result<KvPagePool> KvPagePool::create(const KvCacheSpec& spec, const KvPageLayout& layout, int64_t num_pages,
                                      int64_t stage_slots) {
  PAGODA_RETURN_IF_ERROR(spec.validate());
  if (num_pages < 1 || num_pages > (int64_t{1} << 30)) {
    return Status::invalid_argument("a KV page pool needs 1..2^30 pages, got " + std::to_string(num_pages));
  }
  int64_t stages = 0;
  for (const KvGroupSpec& g : spec.groups) {
    stages += stage_bytes_of(g.layer, spec.block_size, stage_slots) * static_cast<int64_t>(g.layers.size());
  }
  const int64_t bytes = stages + num_pages * layout.page_bytes;
  Result<AlignedBuffer> memory = AlignedBuffer::allocate(static_cast<size_t>(bytes), /*prefault=*/true);
  if (!memory.is_ok()) {
    return Status::resource_exhausted("KV page pool of " + std::to_string(bytes) + " bytes: " + memory.status().message());
  }
  return KvPagePool(spec, layout, std::move(memory).value(), num_pages, stage_slots);
}

KvPagePool::KvPagePool(const KvCacheSpec& spec, const KvPageLayout& layout, AlignedBuffer memory, int64_t num_pages,
                       int64_t stage_slots)
    : spec_(spec), layout_(layout), memory_(std::move(memory)), num_pages_(num_pages) {
  const int64_t B = spec_.block_size;
  views_.resize(static_cast<size_t>(spec_.n_layer));
  uint8_t* stage = memory_.data();
  int64_t stages = 0;
  for (const KvGroupSpec& g : spec_.groups) {
    stages += stage_bytes_of(g.layer, B, stage_slots) * static_cast<int64_t>(g.layers.size());
  }
  pages_ = memory_.data() + stages;
  uint8_t* const pages = pages_;
  for (const KvGroupSpec& g : spec_.groups) {
    if (!g.has_blocks()) continue;
    const KvLayerSpec& l = g.layer;
    for (int64_t layer : g.layers) {
      const KvLayerPlace& place = layout_.places[static_cast<size_t>(layer)];
      kernels::KvLayerView& v = views_[static_cast<size_t>(layer)];
      v.k = pages + place.k_offset;
      v.k_only = l.kind == KvGroupKind::kLatent;
      v.v = v.k_only ? nullptr : pages + place.v_offset;
      v.dtype = l.dtype;
      v.layout = kernels::KvLayoutKind::kND;
      v.num_blocks = num_pages_;
      v.block_size = B;
      v.n_kv_head = l.n_kv_head;
      v.head_dim = l.head_dim;
      v.block_stride = layout_.page_bytes;
      v.stage = kernels::kv_stage_bind(stage, l.dtype, B, l.n_kv_head, l.head_dim, stage_slots);
      kernels::kv_stage_reset(v.stage);
      stage += stage_bytes_of(l, B, stage_slots);
    }
  }
  for (const KvGroupSpec& g : spec_.groups) {
    if (g.has_blocks()) continue;
    for (int64_t layer : g.layers) views_[static_cast<size_t>(layer)] = views_[static_cast<size_t>(g.layer.source_layer)];
  }
}

void KvPagePool::copy_block(const KvCoordinator& kv, const KvGroupCopy& c) {
  const int64_t parts = layout_.parts[static_cast<size_t>(c.group)];
  uint8_t* const pages = pages_;
  for (int64_t part = 0; part < parts; ++part) {
    const int32_t src = kv.page(c.group, c.src_block, part), dst = kv.page(c.group, c.dst_block, part);
    CHECK(src != dst);
    std::memcpy(pages + dst * layout_.page_bytes, pages + src * layout_.page_bytes, static_cast<size_t>(layout_.page_bytes));
    for (int64_t layer : spec_.groups[static_cast<size_t>(c.group)].layers) {
      if (layout_.places[static_cast<size_t>(layer)].part == part) kernels::kv_stage_copy(views_[static_cast<size_t>(layer)], src, dst);
    }
  }
}

}  // namespace pagoda::kvcache
