// KvLayout: the geometry of the paged KV cache, and the sizing arithmetic the planner and
// the engine share.
//
//   bytes per token = 2 (K and V) x n_layer x n_kv_head x head_dim x sizeof(dtype)
//   bytes per block = bytes per token x block_size
//   num_blocks      = floor(budget / bytes per block); token capacity = num_blocks x block_size
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda::kvcache {

struct KvLayout {
  int64_t n_layer = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;     // tokens per block
  DType dtype = DType::kF32;   // element type of cached K/V (f32 or f16 today)

  int64_t elem_bytes() const;
  int64_t bytes_per_token() const { return 2 * n_layer * n_kv_head * head_dim * elem_bytes(); }
  int64_t bytes_per_block() const { return bytes_per_token() * block_size; }
  // Bytes of one layer's K (or V) array over `num_blocks` blocks.
  int64_t layer_array_bytes(int64_t num_blocks) const {
    return num_blocks * block_size * n_kv_head * head_dim * elem_bytes();
  }
  Status validate() const;
};

struct KvPoolPlan {
  int64_t num_blocks = 0;
  int64_t pool_bytes = 0;        // num_blocks x bytes per block
  int64_t token_capacity = 0;    // num_blocks x block_size
};

// Sizes a pool from a byte budget. Fails when the budget holds fewer than `min_blocks`.
Result<KvPoolPlan> plan_kv_pool(const KvLayout& layout, int64_t budget_bytes, int64_t min_blocks = 1);

// One human line for start-up logs: "KV cache: f32, 5120 B/token (2 x 5 layers x 4 kv heads x
// 8 dims x 4 B), block 16 tokens = 81920 B, 800 blocks = 62.5 MiB, capacity 12800 tokens".
std::string describe_kv_pool(const KvLayout& layout, const KvPoolPlan& plan);

// "1.5 GiB", "640 KiB", "12 B"
std::string format_bytes(int64_t bytes);

// Parses "512M", "2G", "1.5GiB", "1048576" into bytes.
Result<int64_t> parse_bytes(const std::string& text);

}  // namespace pagoda::kvcache
