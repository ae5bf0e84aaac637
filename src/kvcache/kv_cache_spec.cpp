#include "kvcache/kv_cache_spec.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/check.h"

namespace pagoda::kvcache {
namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t k_bytes(const KvLayerSpec& l, int64_t block_size) {
  return align_up(kernels::kv_block_bytes_k(l.dtype, l.head_dim, block_size, l.n_kv_head));
}
int64_t v_bytes(const KvLayerSpec& l, int64_t block_size) {
  if (l.kind == KvGroupKind::kLatent) return 0;
  return align_up(kernels::kv_block_bytes_v(l.dtype, l.head_dim, block_size, l.n_kv_head));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string_view kv_group_kind_name(KvGroupKind kind) {
  switch (kind) {
    case KvGroupKind::kFull: return "full";
    case KvGroupKind::kSliding: return "sliding";
    case KvGroupKind::kLatent: return "latent";
    case KvGroupKind::kShared: return "shared";
  }
  return "?";
}

int64_t KvGroupSpec::layer_block_bytes(int64_t block_size) const {
  if (!has_blocks()) return 0;
  return k_bytes(layer, block_size) + v_bytes(layer, block_size);
}

int64_t KvGroupSpec::blocks_per_sequence(int64_t context, int64_t block_size) const {
  if (!has_blocks() || context <= 0) return 0;
  const int64_t all = ceil_div(context, block_size);
  if (layer.kind != KvGroupKind::kSliding) return all;
  return std::min(all, ceil_div(layer.window - 1, block_size) + 1);
}

Status KvCacheSpec::validate() const {
  if (block_size < 1 || block_size > 4096) return Status::invalid_argument("block_size must be in [1, 4096]");
  if (n_layer < 1) return Status::invalid_argument("a KV cache spec needs at least one layer");
  std::vector<int> seen(static_cast<size_t>(n_layer), 0);
  for (const KvGroupSpec& g : groups) {
    const KvLayerSpec& l = g.layer;
    if (g.layers.empty()) return Status::invalid_argument("a layer group has no layers");
    if (l.kind == KvGroupKind::kSliding && l.window < 1) return Status::invalid_argument("a sliding group needs a window >= 1");
    if (l.kind != KvGroupKind::kSliding && l.window != 0) return Status::invalid_argument("only sliding groups have a window");
    if (l.kind == KvGroupKind::kShared) {
      if (l.source_layer < 0 || l.source_layer >= n_layer) return Status::invalid_argument("a shared layer's source is not a layer");
    } else {
      if (l.n_kv_head < 1 || l.head_dim < 1) return Status::invalid_argument("kv heads and head dim must be positive");
      if (l.kind == KvGroupKind::kLatent && l.n_kv_head != 1) return Status::invalid_argument("a latent group has one kv head");
    }
    for (int64_t layer : g.layers) {
      if (layer < 0 || layer >= n_layer) return Status::invalid_argument("layer " + std::to_string(layer) + " is out of range");
      if (seen[static_cast<size_t>(layer)]++) return Status::invalid_argument("layer " + std::to_string(layer) + " is in two groups");
    }
    if (!std::is_sorted(g.layers.begin(), g.layers.end())) return Status::invalid_argument("a group's layers must ascend");
  }
  for (int64_t i = 0; i < n_layer; ++i) {
    if (!seen[static_cast<size_t>(i)]) return Status::invalid_argument("layer " + std::to_string(i) + " is in no group");
  }
  for (const KvGroupSpec& g : groups) {
    if (g.layer.kind != KvGroupKind::kShared) continue;
    const KvGroupSpec& src = groups[static_cast<size_t>(group_of(g.layer.source_layer))];
    if (!src.has_blocks()) return Status::invalid_argument("a shared layer's source shares too");
  }
  return Status::ok();
}

int64_t KvCacheSpec::bytes_per_block() const {
  int64_t total = 0;
  for (const KvGroupSpec& g : groups) total += g.block_bytes(block_size);
  return total;
}

int64_t KvCacheSpec::bytes_per_sequence(int64_t context) const {
  int64_t total = 0;
  for (const KvGroupSpec& g : groups) total += g.block_bytes(block_size) * g.blocks_per_sequence(context, block_size);
  return total;
}

int64_t KvCacheSpec::group_of(int64_t layer) const {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (std::binary_search(groups[g].layers.begin(), groups[g].layers.end(), layer)) return static_cast<int64_t>(g);
  }
  CHECK(false) << "layer " << layer << " is in no group";
  return -1;
}

bool KvCacheSpec::has_sliding() const {
  return std::any_of(groups.begin(), groups.end(), [](const KvGroupSpec& g) { return g.layer.kind == KvGroupKind::kSliding; });
}

std::string KvCacheSpec::describe() const {
  std::ostringstream out;
  out << groups.size() << (groups.size() == 1 ? " group:" : " groups:");
  for (size_t g = 0; g < groups.size(); ++g) {
    const KvLayerSpec& l = groups[g].layer;
    out << (g ? ", " : " ") << kv_group_kind_name(l.kind);
    if (l.kind == KvGroupKind::kSliding) out << ' ' << l.window;
    out << " x" << groups[g].layers.size();
    if (l.kind == KvGroupKind::kShared) {
      out << " (from layer " << l.source_layer << ')';
    } else {
      out << " (" << l.n_kv_head << " kv head" << (l.n_kv_head == 1 ? "" : "s") << " x " << l.head_dim << ", "
          << kernels::kv_dtype_name(l.dtype) << ')';
    }
  }
  return out.str();
}

Result<KvCacheSpec> make_kv_cache_spec(int64_t block_size, std::span<const KvLayerSpec> layers) {
  KvCacheSpec spec;
  spec.block_size = block_size;
  spec.n_layer = static_cast<int64_t>(layers.size());
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    const KvLayerSpec& l = layers[static_cast<size_t>(i)];
    auto it = std::find_if(spec.groups.begin(), spec.groups.end(), [&](const KvGroupSpec& g) { return g.layer == l; });
    if (it == spec.groups.end()) {
      spec.groups.push_back({l, {}});
      it = spec.groups.end() - 1;
    }
    it->layers.push_back(i);
  }
  PAGODA_RETURN_IF_ERROR(spec.validate());
  return spec;
}

KvCacheSpec without_windows(const KvCacheSpec& spec) {
  std::vector<KvLayerSpec> layers(static_cast<size_t>(spec.n_layer));
  for (const KvGroupSpec& g : spec.groups) {
    KvLayerSpec l = g.layer;
    if (l.kind == KvGroupKind::kSliding) {
      l.kind = KvGroupKind::kFull;
      l.window = 0;
    }
    for (int64_t layer : g.layers) layers[static_cast<size_t>(layer)] = l;
  }
  Result<KvCacheSpec> out = make_kv_cache_spec(spec.block_size, layers);
  CHECK(out.is_ok()) << out.status().message();
  return std::move(out).value();
}

int64_t KvPageLayout::pages_per_block_all() const { return std::accumulate(parts.begin(), parts.end(), int64_t{0}); }

int64_t KvPageLayout::waste_per_block(const KvCacheSpec& spec) const {
  return pages_per_block_all() * page_bytes - spec.bytes_per_block();
}

namespace {

// Parts of each group for pages of `page` bytes (whole layers per page), or empty if a layer
// does not fit.
std::vector<int64_t> parts_for(const KvCacheSpec& spec, int64_t page) {
  std::vector<int64_t> parts;
  for (const KvGroupSpec& g : spec.groups) {
    const int64_t per_layer = g.layer_block_bytes(spec.block_size);
    if (per_layer == 0) {
      parts.push_back(0);
      continue;
    }
    if (per_layer > page) return {};
    parts.push_back(ceil_div(static_cast<int64_t>(g.layers.size()), page / per_layer));
  }
  return parts;
}

}  // namespace

Result<KvPageLayout> plan_page_layout(const KvCacheSpec& spec) {
  PAGODA_RETURN_IF_ERROR(spec.validate());
  std::vector<int64_t> candidates;
  int64_t gcd = 0;
  for (const KvGroupSpec& g : spec.groups) {
    const int64_t bytes = g.block_bytes(spec.block_size);
    if (bytes == 0) continue;
    gcd = std::gcd(gcd, bytes);
    candidates.push_back(bytes);
  }
  if (candidates.empty()) return Status::invalid_argument("no layer group keeps KV of its own");
  candidates.push_back(gcd);
  KvPageLayout best;
  int64_t best_waste = -1;
  for (int64_t page : candidates) {
    std::vector<int64_t> parts = parts_for(spec, page);
    if (parts.empty()) continue;
    const int64_t waste = std::accumulate(parts.begin(), parts.end(), int64_t{0}) * page - spec.bytes_per_block();
    if (best_waste < 0 || waste < best_waste || (waste == best_waste && page > best.page_bytes)) {
      best_waste = waste;
      best.page_bytes = page;
      best.parts = std::move(parts);
    }
  }
  CHECK_GE(best_waste, 0);
  best.places.assign(static_cast<size_t>(spec.n_layer), KvLayerPlace{});
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    const KvGroupSpec& group = spec.groups[g];
    if (!group.has_blocks()) continue;
    const int64_t per_page = best.page_bytes / group.layer_block_bytes(spec.block_size);
    const int64_t kb = k_bytes(group.layer, spec.block_size);
    for (size_t i = 0; i < group.layers.size(); ++i) {
      KvLayerPlace& place = best.places[static_cast<size_t>(group.layers[i])];
      place.group = static_cast<int64_t>(g);
      place.part = static_cast<int64_t>(i) / per_page;
      place.k_offset = (static_cast<int64_t>(i) % per_page) * group.layer_block_bytes(spec.block_size);
      place.v_offset = place.k_offset + kb;
    }
  }
  return best;
}

}  // namespace pagoda::kvcache
