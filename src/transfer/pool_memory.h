// PoolMemory: what an instance exposes of its KV pool to peers (P/D disaggregation), and the
// descriptor a peer receives in the handshake: the layout and KV format (a peer whose layout or
// model differs is refused: its bytes would mean something else), and where block b of layer l
// lives:  K at k_base[l] + b x k_block_bytes,  V at v_base[l] + b x v_block_bytes
// (kvcache/block_pool.h: each layer's K and V are arrays of num_blocks blocks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kvcache/block_pool.h"
#include "kvcache/kv_layout.h"

namespace pagoda::transfer {

struct PoolDescriptor {
  std::string engine_id;            // the instance (vLLM's remote_engine_id)
  uint64_t model_fingerprint = 0;
  uint64_t kv_format_key = 0;
  kvcache::KvLayout layout;         // n_layer, n_kv_head, head_dim, block_size, dtype, layout
  int64_t num_blocks = 0;
  int64_t k_block_bytes = 0, v_block_bytes = 0;
  std::vector<uint64_t> k_base, v_base;  // [n_layer] addresses in the owner's address space
  std::vector<uint8_t> rkey;        // ucp_rkey_pack of the registered region
};

struct PoolMemory {
  PoolDescriptor descriptor;        // rkey empty until registered
  uint8_t* region = nullptr;        // the contiguous range covering every block of every layer
  size_t region_bytes = 0;
};

// The pool's memory as a peer sees it (the pool outlives the returned pointers).
PoolMemory describe_pool(kvcache::BlockPool& pool, std::string engine_id, uint64_t model_fingerprint,
                         uint64_t kv_format_key);

// ok when a peer's blocks can be copied byte for byte into ours.
Status check_compatible(const PoolDescriptor& mine, const PoolDescriptor& theirs);

}  // namespace pagoda::transfer
