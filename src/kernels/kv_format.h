// KV cache element formats and layouts: the storage contract shared by store_kv, paged
// attention, the block pool's sizing and the capacity planner (`pagoda kvcalc`).
//
// Sizes are per (token, kv head) and per layer, K and V counted separately; hd = head_dim,
// B = block_size. Scales are f16.
//   f32                 K: 4*hd                     V: 4*hd
//   f16, bf16           K: 2*hd                     V: 2*hd
//   fp8-e4m3, fp8-e5m2  K: hd + 2 (scale per token, head)            V: same
//   int8                K: hd + 2 (symmetric scale per token, head)  V: same
//   int4 (KIVI-style)   K: hd/2 + 4*hd/B (per channel, per block: f16 scale + f16 min)
//                       V: hd/2 + 4      (per token, head: f16 scale + f16 min)
// A block of one layer's K (or V) holds B tokens x n_kv_head heads of that format:
//   kv_block_bytes(format, hd, B, n_kv_head) = B * n_kv_head * per-token bytes (exact, integer).
//
// Layouts (unquantized formats): ND is [num_blocks, B, n_kv_head, hd]; NZ is the fractal
// [num_blocks, n_kv_head*hd/16, B, 16] of Ascend 310-class NPUs (B a multiple of 16).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda::kernels {

enum class KvDType : uint8_t { kF32, kF16, kBF16, kFp8E4M3, kFp8E5M2, kInt8, kInt4 };
enum class KvLayoutKind : uint8_t { kND, kNZ };

std::string_view kv_dtype_name(KvDType dtype);          // "f32", "f16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4"
std::optional<KvDType> kv_dtype_from_name(std::string_view name);
std::string_view kv_layout_name(KvLayoutKind layout);   // "nd", "nz"
std::optional<KvLayoutKind> kv_layout_from_name(std::string_view name);
// fp8-e4m3, fp8-e5m2, int8, int4: codes plus scales (ND layout only).
bool kv_dtype_is_quantized(KvDType dtype);

// Bytes of one layer's K (respectively V) block: block_size tokens x n_kv_head heads.
// int4 needs head_dim even; the formula above is exact per block.
int64_t kv_block_bytes_k(KvDType dtype, int64_t head_dim, int64_t block_size, int64_t n_kv_head);
int64_t kv_block_bytes_v(KvDType dtype, int64_t head_dim, int64_t block_size, int64_t n_kv_head);

}  // namespace pagoda::kernels
