// Reading cached K back as f32, one (slot, kv head) row at a time, in any KV format and layout:
// for debugging dumps (`pagoda run --kv-dump`) and tests, never on the hot path.
#pragma once

#include <cstdint>

#include "kernels/kv_store.h"

namespace pagoda::kernels {

// out[0..n) = K of kv head `kv_head` at `slot` (n <= head_dim). A partial int4 K block is read
// from its stage slot when it has one.
void kv_read_k(const KvLayerView& layer, int64_t slot, int64_t kv_head, float* out, int64_t n);

}  // namespace pagoda::kernels
