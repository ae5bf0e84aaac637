#include "kernels/kv_read.h"

#include <algorithm>
#include <vector>

#include "kernels/kv_block.h"

namespace pagoda::kernels {

void kv_read_k(const KvLayerView& layer, int64_t slot, int64_t kv_head, float* out, int64_t n) {
  CHECK(slot >= 0 && slot < layer.num_blocks * layer.block_size) << "slot " << slot;
  CHECK(kv_head >= 0 && kv_head < layer.n_kv_head) << "kv head " << kv_head;
  CHECK(n >= 0 && n <= layer.head_dim);
  std::vector<float> row(layer.head_dim), params(2 * layer.head_dim);
  detail::KvRowReader reader(layer, /*is_k=*/true, kv_row_ops(Isa::kScalar), row.data(), params.data());
  const int64_t t = slot % layer.block_size;
  reader.begin_block(static_cast<int32_t>(slot / layer.block_size), 0, t + 1, kv_head);
  const float* values = reader.row(t);
  std::copy(values, values + n, out);
}

}  // namespace pagoda::kernels
