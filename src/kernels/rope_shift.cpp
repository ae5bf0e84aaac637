#include "kernels/rope_shift.h"

#include <vector>

#include "core/check.h"

namespace pagoda::kernels {

void rope_shift_k(const KvLayerView& layer, std::span<const int32_t> blocks, int32_t delta, const RopeParams& params,
                  Isa isa) {
  check_kv_view(layer);
  CHECK(layer.dtype != KvDType::kInt4) << "rope_shift_k: int4 K cannot be re-rotated (per-block channel scales)";
  CHECK_EQ(params.head_dim, layer.head_dim);
  const int64_t hd = layer.head_dim, nkv = layer.n_kv_head;
  std::vector<float> row(nkv * hd);  // [n_kv_head, head_dim] one decoded K row
  for (int32_t block : blocks) {
    CHECK(block >= 0 && block < layer.num_blocks) << "rope_shift_k of block " << block;
    for (int64_t r = 0; r < layer.block_size; ++r) {
      for (int64_t h = 0; h < nkv; ++h) kv_load_row_reference(layer, true, block, r, h, false, row.data() + h * hd);
      rope(row.data(), &delta, 1, nkv, params);
      store_k_row(layer, block, r, row.data(), isa);
    }
  }
}

}  // namespace pagoda::kernels
