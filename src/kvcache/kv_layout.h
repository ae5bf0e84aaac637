// KvLayout: the geometry of the paged KV cache, and the sizing arithmetic the planner, the
// block pool and the start-up log share. Byte counts come from the storage contract
// (kernels/kv_format.h), so all three agree for every KV dtype:
//
//   bytes per block = n_layer x (kv_block_bytes_k + kv_block_bytes_v)   (all layers, K and V;
//                     K only for MLA's latent cache: one "head" of kv_lora_rank + rope dim)
//   bytes per token = bytes per block / block_size (rounded up; sizing uses bytes per block)
//   stage bytes     = int4 only: n_layer x stage_slots partial K blocks kept in f32
//                     (kernels/kv_store.h); a fixed cost taken from the budget first
//   num_blocks      = floor((budget - stage bytes) / bytes per block)
//   token capacity  = num_blocks x block_size
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/kv_format.h"

namespace pagoda::kvcache {

struct KvLayout {
  int64_t n_layer = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;                                          // tokens per block
  kernels::KvDType dtype = kernels::KvDType::kF32;                  // element format of cached K/V
  kernels::KvLayoutKind layout = kernels::KvLayoutKind::kND;        // kNZ: unquantized, block_size % 16 == 0
  int64_t stage_slots = 8;  // int4: partial K blocks held in f32 per layer (>= running sequences)
  bool k_only = false;      // MLA latent cache: K blocks only (kernels::KvLayerView::k_only), V 0 bytes

  // One layer's K (V) block: kernels::kv_block_bytes_k (_v).
  int64_t k_block_bytes() const;
  int64_t v_block_bytes() const;
  // One layer's K (V) array over num_blocks blocks.
  int64_t k_array_bytes(int64_t num_blocks) const { return num_blocks * k_block_bytes(); }
  int64_t v_array_bytes(int64_t num_blocks) const { return num_blocks * v_block_bytes(); }
  // Transitional: one layer's K array, equal to its V array for every dtype but int4 (CHECKed).
  int64_t layer_array_bytes(int64_t num_blocks) const;
  int64_t bytes_per_block() const { return n_layer * (k_block_bytes() + v_block_bytes()); }
  int64_t bytes_per_token() const { return (bytes_per_block() + block_size - 1) / block_size; }
  // One layer's stage (0 unless int4), and all layers'.
  int64_t layer_stage_bytes() const;
  int64_t stage_bytes() const { return n_layer * layer_stage_bytes(); }
  Status validate() const;
};

struct KvPoolPlan {
  int64_t num_blocks = 0;
  int64_t pool_bytes = 0;        // num_blocks x bytes per block + stage bytes
  int64_t token_capacity = 0;    // num_blocks x block_size
};

// Sizes a pool from a byte budget. Fails when the budget holds fewer than `min_blocks`.
Result<KvPoolPlan> plan_kv_pool(const KvLayout& layout, int64_t budget_bytes, int64_t min_blocks = 1);

// One human line for start-up logs: "KV cache: int8 nd, 2560 B/token (5 layers x 4 kv heads x
// (K 10 + V 10 B) x 16 tokens per block), block 16 tokens = 40.0 KiB, 800 blocks = 31.2 MiB,
// capacity 12800 tokens".
std::string describe_kv_pool(const KvLayout& layout, const KvPoolPlan& plan);

// "1.5 GiB", "640 KiB", "12 B"
std::string format_bytes(int64_t bytes);

// Parses "512M", "2G", "1.5GiB", "1048576" into bytes.
Result<int64_t> parse_bytes(const std::string& text);

}  // namespace pagoda::kvcache
