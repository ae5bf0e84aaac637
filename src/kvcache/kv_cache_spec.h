// KvCacheSpec: what every layer of a model caches, as layer groups (DESIGN.md §1-2), and how
// the groups share one pool of equal pages (KvPageLayout).
//
// A group is a set of layers that cache the same thing the same way: a kind, a window, a K/V
// shape and a format. Layers with equal KvLayerSpecs form one group (as vLLM's hybrid KV cache
// manager groups them), in order of their first layer:
//   kFull     every position is kept: a block of group g holds block_size positions of each of
//             its layers' K and V
//   kSliding  a query at position p attends to [p - window + 1, p]; blocks wholly before the
//             window of the next token are released (and stay prefix-cacheable when cached)
//   kLatent   MLA: one K-only latent row per token and layer (n_kv_head 1, head_dim = rank +
//             rope dim), kept for every position like kFull
//   kShared   the layer reads another layer's K/V (cross-layer sharing): no memory, no blocks
//
// Pages (KvPageLayout). One pool of pages of page_bytes each serves every group. A block of
// group g (block_size positions of all of g's layers) takes parts[g] pages; each page holds a
// *part* of the group's layers, K then V of each, 64-byte aligned:
//   page p, part i of group g: [K of layer a | V of layer a | K of layer b | ...]
// so layer l's K block sits at  pool + page * page_bytes + k_offset(l)  and its V block at
// v_offset(l): a strided array with stride page_bytes. page_bytes is chosen to waste least:
// among the gcd of the groups' block bytes and each group's block bytes, the one whose parts
// (whole layers, ceil-packed) leave the fewest unused bytes, ties to the larger page (fewer
// pages per block). Gemma-3-like models (n sliding layers to every global one, equal shapes)
// waste nothing; waste_per_block() says what a layout loses.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/kv_format.h"

namespace pagoda::kvcache {

enum class KvGroupKind : uint8_t { kFull, kSliding, kLatent, kShared };
std::string_view kv_group_kind_name(KvGroupKind kind);  // "full", "sliding", "latent", "shared"

// What one layer caches.
struct KvLayerSpec {
  KvGroupKind kind = KvGroupKind::kFull;
  int64_t window = 0;      // kSliding: tokens attended, the query's own included (> 0)
  int64_t n_kv_head = 0;   // kLatent: 1
  int64_t head_dim = 0;    // per K (and V) head; kLatent: kv_lora_rank + rope dim
  kernels::KvDType dtype = kernels::KvDType::kF16;
  int64_t source_layer = -1;  // kShared: the layer whose K/V it reads
  bool operator==(const KvLayerSpec&) const = default;
};

struct KvGroupSpec {
  KvLayerSpec layer;            // the spec every layer of the group shares
  std::vector<int64_t> layers;  // model layer indices, ascending, non-empty

  // One layer's K + V bytes for a block of block_size positions (K only for kLatent; 0 for kShared).
  int64_t layer_block_bytes(int64_t block_size) const;
  // All of the group's layers for one block.
  int64_t block_bytes(int64_t block_size) const {
    return layer_block_bytes(block_size) * static_cast<int64_t>(layers.size());
  }
  bool has_blocks() const { return layer.kind != KvGroupKind::kShared; }
  // Blocks one sequence holds at `context` tokens (sliding: the window's, as vLLM counts:
  // min(ceil(C / B), ceil((W - 1) / B) + 1)).
  int64_t blocks_per_sequence(int64_t context, int64_t block_size) const;
};

struct KvCacheSpec {
  int64_t block_size = 16;
  int64_t n_layer = 0;
  std::vector<KvGroupSpec> groups;  // in order of first layer

  // Groups partition [0, n_layer); sizes positive; windows only on kSliding; shared sources
  // are layers with blocks.
  Status validate() const;
  // Bytes of one block of positions over every group (what "every layer full" would cost
  // per block is the same sum: only the number of blocks a sequence holds differs).
  int64_t bytes_per_block() const;
  // KV bytes of one sequence of `context` tokens, each group counted as blocks_per_sequence.
  int64_t bytes_per_sequence(int64_t context) const;
  // The group of `layer`.
  int64_t group_of(int64_t layer) const;
  bool has_sliding() const;
  // "2 groups: full x4 (1 kv head x 256, f16), sliding 512 x22 (...)"
  std::string describe() const;
};

// Groups `layers` (one spec per model layer): equal specs form one group.
Result<KvCacheSpec> make_kv_cache_spec(int64_t block_size, std::span<const KvLayerSpec> layers);

// The same layers with every sliding window removed (kFull): what a cache without layer
// groups keeps, for comparisons.
KvCacheSpec without_windows(const KvCacheSpec& spec);

struct KvLayerPlace {
  int64_t group = -1;     // -1: a shared layer (no memory of its own)
  int64_t part = 0;       // which page of its group's block
  int64_t k_offset = 0;   // bytes within the page
  int64_t v_offset = 0;   // == k_offset + K bytes; unused for kLatent
};

struct KvPageLayout {
  int64_t page_bytes = 0;
  std::vector<int64_t> parts;         // [groups] pages per block of each group (0: kShared)
  std::vector<KvLayerPlace> places;   // [n_layer]
  // Pages one block of every group takes, and the bytes they hold that no layer uses.
  int64_t pages_per_block_all() const;
  int64_t waste_per_block(const KvCacheSpec& spec) const;
};

Result<KvPageLayout> plan_page_layout(const KvCacheSpec& spec);

}  // namespace pagoda::kvcache
