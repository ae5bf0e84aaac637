// PoolMemory and the compatibility check of a peer's descriptor (transfer/pool_memory.h).
#include "transfer/pool_memory.h"

#include <algorithm>

namespace pagoda::transfer {

PoolMemory describe_pool(kvcache::BlockPool& pool, std::string engine_id, uint64_t model_fingerprint,
                         uint64_t kv_format_key) {
  const kvcache::KvLayout& layout = pool.layout();
  PoolMemory m;
  PoolDescriptor& d = m.descriptor;
  d.engine_id = std::move(engine_id);
  d.model_fingerprint = model_fingerprint;
  d.kv_format_key = kv_format_key;
  d.layout = layout;
  d.num_blocks = pool.num_blocks();
  d.k_block_bytes = layout.k_block_bytes();
  d.v_block_bytes = layout.v_block_bytes();
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int64_t l = 0; l < layout.n_layer; ++l) {
    const kernels::KvLayerView view = pool.layer_view(l);
    const auto k = reinterpret_cast<uintptr_t>(view.k);
    const auto v = reinterpret_cast<uintptr_t>(view.v);
    d.k_base.push_back(k);
    d.v_base.push_back(v);
    lo = std::min({lo, k, v});
    hi = std::max({hi, k + static_cast<uintptr_t>(d.num_blocks * d.k_block_bytes),
                   v + static_cast<uintptr_t>(d.num_blocks * d.v_block_bytes)});
  }
  m.region = reinterpret_cast<uint8_t*>(lo);
  m.region_bytes = hi > lo ? hi - lo : 0;
  return m;
}

Status check_compatible(const PoolDescriptor& mine, const PoolDescriptor& theirs) {
  const kvcache::KvLayout& a = mine.layout;
  const kvcache::KvLayout& b = theirs.layout;
  if (mine.model_fingerprint != theirs.model_fingerprint) {
    return Status::invalid_argument("the peer " + theirs.engine_id + " serves another model (fingerprint differs)");
  }
  if (mine.kv_format_key != theirs.kv_format_key || a.dtype != b.dtype || a.layout != b.layout) {
    return Status::invalid_argument("the peer " + theirs.engine_id + " stores KV in another format");
  }
  if (a.n_layer != b.n_layer || a.n_kv_head != b.n_kv_head || a.head_dim != b.head_dim || a.block_size != b.block_size ||
      mine.k_block_bytes != theirs.k_block_bytes || mine.v_block_bytes != theirs.v_block_bytes) {
    return Status::invalid_argument("the peer " + theirs.engine_id + " has another KV layout (layers, heads, block size)");
  }
  return Status::ok();
}

}  // namespace pagoda::transfer
