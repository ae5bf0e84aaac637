#include "kvcache/kv_cache_spec.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagoda::kvcache {
namespace {

using kernels::KvDType;

// Gemma 3's pattern: layer i slides unless (i + 1) % 6 == 0.
std::vector<KvLayerSpec> gemma3_layers(int64_t n_layer, int64_t window, int64_t n_kv_head, int64_t head_dim) {
  std::vector<KvLayerSpec> layers;
  for (int64_t i = 0; i < n_layer; ++i) {
    KvLayerSpec l{KvGroupKind::kFull, 0, n_kv_head, head_dim, KvDType::kF16, -1};
    if ((i + 1) % 6 != 0) {
      l.kind = KvGroupKind::kSliding;
      l.window = window;
    }
    layers.push_back(l);
  }
  return layers;
}

TEST(KvCacheSpec, EqualLayerSpecsFormOneGroupInOrderOfFirstLayer) {
  auto spec = make_kv_cache_spec(16, gemma3_layers(12, 512, 2, 64));
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  ASSERT_EQ(spec->groups.size(), 2u);
  EXPECT_EQ(spec->groups[0].layer.kind, KvGroupKind::kSliding);
  EXPECT_EQ(spec->groups[0].layers, (std::vector<int64_t>{0, 1, 2, 3, 4, 6, 7, 8, 9, 10}));
  EXPECT_EQ(spec->groups[1].layers, (std::vector<int64_t>{5, 11}));
  EXPECT_EQ(spec->group_of(11), 1);
  EXPECT_EQ(spec->describe(), "2 groups: sliding 512 x10 (2 kv heads x 64, f16), full x2 (2 kv heads x 64, f16)");
  // f16: K and V are 16 positions x 2 heads x 64 x 2 bytes each.
  EXPECT_EQ(spec->groups[0].layer_block_bytes(16), 2 * 16 * 2 * 64 * 2);
  EXPECT_EQ(spec->bytes_per_block(), 12 * 2 * 16 * 2 * 64 * 2);
}

TEST(KvCacheSpec, SlidingBlocksPerSequenceAreCappedByTheWindow) {
  KvGroupSpec g{{KvGroupKind::kSliding, 512, 1, 64, KvDType::kF16, -1}, {0}};
  EXPECT_EQ(g.blocks_per_sequence(100, 16), 7);     // shorter than the window: every block
  EXPECT_EQ(g.blocks_per_sequence(8192, 16), 33);   // ceil(511 / 16) + 1
  g.layer.window = 513;
  EXPECT_EQ(g.blocks_per_sequence(8192, 16), 33);   // 512 earlier tokens fit 32 aligned blocks, +1
  KvGroupSpec full{{KvGroupKind::kFull, 0, 1, 64, KvDType::kF16, -1}, {1}};
  EXPECT_EQ(full.blocks_per_sequence(8192, 16), 512);
}

TEST(KvCacheSpec, WithoutWindowsEveryLayerKeepsEveryPosition) {
  auto spec = make_kv_cache_spec(16, gemma3_layers(12, 512, 2, 64));
  ASSERT_TRUE(spec.is_ok());
  const KvCacheSpec full = without_windows(*spec);
  ASSERT_EQ(full.groups.size(), 1u);
  EXPECT_EQ(full.bytes_per_block(), spec->bytes_per_block());
  // At 8k: 2/12 of the layers keep 512 blocks, 10/12 keep 33.
  EXPECT_EQ(spec->bytes_per_sequence(8192), spec->groups[0].block_bytes(16) * 33 + spec->groups[1].block_bytes(16) * 512);
  EXPECT_EQ(full.bytes_per_sequence(8192), full.bytes_per_block() * 512);
}

TEST(KvCacheSpec, RefusesMalformedSpecs) {
  KvCacheSpec spec;
  spec.n_layer = 2;
  spec.groups.push_back({{KvGroupKind::kFull, 0, 1, 8, KvDType::kF16, -1}, {0}});
  EXPECT_NE(spec.validate().message().find("layer 1 is in no group"), std::string::npos);
  spec.groups.push_back({{KvGroupKind::kSliding, 0, 1, 8, KvDType::kF16, -1}, {1}});
  EXPECT_NE(spec.validate().message().find("window"), std::string::npos);
  spec.groups[1].layer.window = 4;
  spec.groups[1].layers = {0};
  EXPECT_NE(spec.validate().message().find("two groups"), std::string::npos);
  spec.groups[1].layers = {1};
  EXPECT_TRUE(spec.validate().is_ok());
  spec.groups[1].layer = {KvGroupKind::kShared, 0, 0, 0, KvDType::kF16, 1};
  EXPECT_NE(spec.validate().message().find("source shares"), std::string::npos);
  spec.groups[1].layer.source_layer = 0;
  EXPECT_TRUE(spec.validate().is_ok());
}

// Every layer's K and V lie inside its page, no two layers of one part overlap, and parts
// hold whole layers.
void expect_sound_layout(const KvCacheSpec& spec, const KvPageLayout& layout) {
  ASSERT_EQ(layout.places.size(), static_cast<size_t>(spec.n_layer));
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    const KvGroupSpec& group = spec.groups[g];
    std::vector<std::pair<int64_t, int64_t>> used;  // (part, offset)
    for (int64_t layer : group.layers) {
      const KvLayerPlace& p = layout.places[static_cast<size_t>(layer)];
      if (!group.has_blocks()) {
        EXPECT_EQ(p.group, -1);
        continue;
      }
      EXPECT_EQ(p.group, static_cast<int64_t>(g));
      EXPECT_LT(p.part, layout.parts[g]);
      EXPECT_EQ(p.k_offset % 64, 0);
      EXPECT_LE(p.k_offset + group.layer_block_bytes(spec.block_size), layout.page_bytes);
      EXPECT_GT(p.v_offset, p.k_offset);
      for (const auto& [part, offset] : used) EXPECT_FALSE(part == p.part && offset == p.k_offset);
      used.emplace_back(p.part, p.k_offset);
    }
  }
}

TEST(KvPageLayout, Gemma3PatternsWasteNothing) {
  // 12B-like: 48 layers, 8 global, 40 sliding: a page is the 8 global layers' block.
  auto spec = make_kv_cache_spec(16, gemma3_layers(48, 1024, 8, 256));
  ASSERT_TRUE(spec.is_ok());
  auto layout = plan_page_layout(*spec);
  ASSERT_TRUE(layout.is_ok()) << layout.status().message();
  EXPECT_EQ(layout->page_bytes, spec->groups[1].block_bytes(16));
  EXPECT_EQ(layout->parts, (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(layout->waste_per_block(*spec), 0);
  expect_sound_layout(*spec, *layout);
  // 1B-like: 26 layers, 4 global, 22 sliding: gcd 2 layers per page, 11 + 2 parts.
  auto small = make_kv_cache_spec(16, gemma3_layers(26, 512, 1, 256));
  ASSERT_TRUE(small.is_ok());
  auto small_layout = plan_page_layout(*small);
  ASSERT_TRUE(small_layout.is_ok());
  EXPECT_EQ(small_layout->parts, (std::vector<int64_t>{11, 2}));
  EXPECT_EQ(small_layout->waste_per_block(*small), 0);
  expect_sound_layout(*small, *small_layout);
}

TEST(KvPageLayout, GroupsOfDifferentHeadSizesSharePages) {
  // Gemma-4-like: sliding layers 16 kv heads x 256, global 4 x 512 (half the bytes per layer).
  std::vector<KvLayerSpec> layers;
  for (int64_t i = 0; i < 12; ++i) {
    if ((i + 1) % 6 == 0) layers.push_back({KvGroupKind::kFull, 0, 4, 512, KvDType::kF16, -1});
    else layers.push_back({KvGroupKind::kSliding, 1024, 16, 256, KvDType::kF16, -1});
  }
  layers[3] = {KvGroupKind::kShared, 0, 0, 0, KvDType::kF16, 1};  // layer 3 reads layer 1's K/V
  auto spec = make_kv_cache_spec(16, layers);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  auto layout = plan_page_layout(*spec);
  ASSERT_TRUE(layout.is_ok());
  expect_sound_layout(*spec, *layout);
  EXPECT_EQ(layout->waste_per_block(*spec), 0);  // 9 sliding x 2 units, 2 global x 1 unit: gcd 2 units
  EXPECT_EQ(layout->parts[spec->group_of(3)], 0);
}

TEST(KvPageLayout, CoprimeGroupSizesTakeOneLayerPerPage) {
  // 3 full + 7 sliding of equal bytes: gcd 1 layer (10 parts, no waste) wins over 3-layer pages.
  std::vector<KvLayerSpec> layers;
  for (int64_t i = 0; i < 10; ++i) layers.push_back({i < 3 ? KvGroupKind::kFull : KvGroupKind::kSliding, i < 3 ? 0 : 64, 1, 32, KvDType::kF16, -1});
  auto spec = make_kv_cache_spec(16, layers);
  ASSERT_TRUE(spec.is_ok());
  auto layout = plan_page_layout(*spec);
  ASSERT_TRUE(layout.is_ok());
  EXPECT_EQ(layout->waste_per_block(*spec), 0);
  EXPECT_EQ(layout->pages_per_block_all(), 10);
  expect_sound_layout(*spec, *layout);
}

}  // namespace
}  // namespace pagoda::kvcache
