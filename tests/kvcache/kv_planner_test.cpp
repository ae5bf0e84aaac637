#include "kvcache/kv_planner.h"

#include <gtest/gtest.h>

#include "kvcache/kv_layout.h"

namespace pagoda::kvcache {
namespace {

using kernels::KvDType;

KvModelSpec preset(const char* name) {
  auto p = find_kv_model_preset(name);
  EXPECT_TRUE(p.has_value()) << name;
  return p.value_or(KvModelSpec{});
}

KvPlanRow row_for(const KvModelSpec& spec, KvDType dtype, KvPlanOptions options = {}) {
  auto plan = plan_capacity(spec, options, {dtype});
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  if (!plan.is_ok() || plan->rows.size() != 1) return {};
  return plan->rows[0];
}

TEST(KvPlanner, PresetBytesPerTokenInF16AreExact) {
  // 2 (K, V) x layers x kv heads x head dim x 2 bytes.
  EXPECT_EQ(row_for(preset("llama-3-8b"), KvDType::kF16).bytes_per_token, 131072);   // 2x32x8x128x2
  EXPECT_EQ(row_for(preset("llama-2-7b"), KvDType::kF16).bytes_per_token, 524288);   // 2x32x32x128x2
  EXPECT_EQ(row_for(preset("llama-2-13b"), KvDType::kF16).bytes_per_token, 819200);  // 2x40x40x128x2
  // Llama-2-70B is GQA (8 kv heads: k_proj maps 8192 -> 1024), not MHA: 2x80x8x128x2.
  EXPECT_EQ(row_for(preset("llama-2-70b"), KvDType::kF16).bytes_per_token, 327680);
  EXPECT_EQ(row_for(preset("llama-3-70b"), KvDType::kF16).bytes_per_token, 327680);
  EXPECT_EQ(row_for(preset("qwen2.5-7b"), KvDType::kF16).bytes_per_token, 57344);    // 2x28x4x128x2
  EXPECT_EQ(row_for(preset("gemma-2-9b"), KvDType::kF16).bytes_per_token, 344064);   // 2x42x8x256x2
  const KvModelSpec mistral = preset("mistral-7b");
  EXPECT_EQ(row_for(mistral, KvDType::kF16).bytes_per_token, 131072);
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.num_sliding_layers(), 32);
  EXPECT_EQ(row_for(preset("llama-3-8b"), KvDType::kF16).bytes_per_block, 131072 * 16);
}

TEST(KvPlanner, MlaCachesOneLatentRowPerLayer) {
  const KvModelSpec ds = preset("deepseek-v3");
  EXPECT_TRUE(ds.is_mla());
  EXPECT_EQ(ds.attention_kind(), "MLA");
  EXPECT_EQ(row_for(ds, KvDType::kF16).bytes_per_token, 61 * (512 + 64) * 2);  // 70,272
  EXPECT_EQ(row_for(ds, KvDType::kF16).bytes_per_token, 70272);
  EXPECT_EQ(row_for(ds, KvDType::kF32).bytes_per_token, 140544);
  EXPECT_EQ(row_for(ds, KvDType::kInt8).bytes_per_token, 61 * (576 + 2));  // + f16 scale per row
  // K only, one "head" of 576: the head count and head_dim fields play no part.
  KvModelSpec other = ds;
  other.n_kv_head = 1;
  other.head_dim = 7;
  EXPECT_EQ(row_for(other, KvDType::kF16).bytes_per_block, row_for(ds, KvDType::kF16).bytes_per_block);
}

TEST(KvPlanner, EveryFormatMatchesKvFormatAndItsDocumentedSize) {
  const KvModelSpec s = preset("llama-3-8b");  // 32 layers, 8 kv heads, head dim 128
  for (KvDType d : all_kv_dtypes()) {
    const int64_t per_layer = kernels::kv_block_bytes_k(d, 128, 16, 8) + kernels::kv_block_bytes_v(d, 128, 16, 8);
    EXPECT_EQ(row_for(s, d).bytes_per_block, 32 * per_layer) << kernels::kv_dtype_name(d);
  }
  // The formulas of kernels/kv_format.h, per token: 32 layers x 8 heads x (K + V).
  EXPECT_EQ(row_for(s, KvDType::kF32).bytes_per_token, 32 * 8 * 2 * 512);
  EXPECT_EQ(row_for(s, KvDType::kBF16).bytes_per_token, 32 * 8 * 2 * 256);
  EXPECT_EQ(row_for(s, KvDType::kFp8E4M3).bytes_per_token, 32 * 8 * 2 * 130);
  EXPECT_EQ(row_for(s, KvDType::kInt8).bytes_per_token, 32 * 8 * 2 * 130);
  // int4: K 64 + 4 x 128 / 16 (per-channel scale+min per block), V 64 + 4 (per token).
  EXPECT_EQ(row_for(s, KvDType::kInt4).bytes_per_token, 32 * 8 * (96 + 68));
  EXPECT_EQ(row_for(s, KvDType::kInt4).bytes_per_block, 32 * 8 * (16 * 64 + 4 * 128 + 16 * 68));
}

TEST(KvPlanner, DTypesOrderBySize) {
  const KvModelSpec s = preset("llama-3-8b");
  EXPECT_LT(row_for(s, KvDType::kInt4).bytes_per_token, row_for(s, KvDType::kInt8).bytes_per_token);
  EXPECT_LT(row_for(s, KvDType::kInt8).bytes_per_token, row_for(s, KvDType::kF16).bytes_per_token);
  EXPECT_LT(row_for(s, KvDType::kF16).bytes_per_token, row_for(s, KvDType::kF32).bytes_per_token);
  EXPECT_EQ(row_for(s, KvDType::kBF16).bytes_per_token, row_for(s, KvDType::kF16).bytes_per_token);
  EXPECT_EQ(row_for(s, KvDType::kFp8E5M2).bytes_per_token, row_for(s, KvDType::kInt8).bytes_per_token);
}

TEST(KvPlanner, AgreesWithTheEnginePoolSizing) {
  // The engine sizes its pool with KvLayout + plan_kv_pool; with the whole budget given to KV
  // the planner must find the same blocks for every preset and format (int4 staging included).
  const int64_t budget = int64_t{3} << 30;
  KvPlanOptions o;
  o.mem_bytes = budget;
  o.weight_bytes = 0;
  o.overhead_bytes = 0;
  for (const KvModelSpec& s : kv_model_presets()) {
    if (s.is_mla()) continue;  // the engine has no MLA cache
    for (KvDType d : all_kv_dtypes()) {
      KvLayout layout;
      layout.n_layer = s.n_layer;
      layout.n_kv_head = s.n_kv_head;
      layout.head_dim = s.head_dim;
      layout.block_size = 16;
      layout.dtype = d;
      const KvPlanRow r = row_for(s, d, o);
      EXPECT_EQ(r.bytes_per_block, layout.bytes_per_block()) << s.name << " " << kernels::kv_dtype_name(d);
      EXPECT_EQ(r.stage_bytes, layout.stage_bytes()) << s.name << " " << kernels::kv_dtype_name(d);
      auto pool = plan_kv_pool(layout, budget);
      ASSERT_TRUE(pool.is_ok()) << pool.status().message();
      EXPECT_EQ(r.num_blocks, pool->num_blocks) << s.name << " " << kernels::kv_dtype_name(d);
      EXPECT_EQ(r.max_cached_tokens, pool->token_capacity) << s.name << " " << kernels::kv_dtype_name(d);
    }
  }
  EXPECT_GT(row_for(preset("llama-3-8b"), KvDType::kInt4).stage_bytes, 0);
  EXPECT_EQ(row_for(preset("llama-3-8b"), KvDType::kInt8).stage_bytes, 0);
}

// 2 layers, 1 kv head of 4 dims, f32, blocks of 4 tokens: 128 B per layer-block, 256 B per block.
KvModelSpec tiny() {
  KvModelSpec s;
  s.name = "tiny";
  s.n_layer = 2;
  s.n_head = 2;
  s.n_kv_head = 1;
  s.head_dim = 4;
  return s;
}

TEST(KvPlanner, CapacityArithmetic) {
  KvPlanOptions o;
  o.block_size = 4;
  o.mem_bytes = 10000;
  o.weight_bytes = 1000;
  o.overhead_bytes = 0;
  o.context = 10;
  auto plan = plan_capacity(tiny(), o, {KvDType::kF32});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->available_bytes, 9000);
  const KvPlanRow& r = plan->rows[0];
  EXPECT_EQ(r.bytes_per_block, 256);
  EXPECT_EQ(r.bytes_per_token, 64);
  EXPECT_EQ(r.num_blocks, 35);          // 9000 / 256
  EXPECT_EQ(r.max_cached_tokens, 140);  // 35 x 4
  EXPECT_EQ(r.full_blocks_per_sequence, 3);  // ceil(10 / 4): whole blocks per sequence
  EXPECT_EQ(r.bytes_per_sequence, 768);
  EXPECT_EQ(r.max_sequences, 11);       // 9000 / 768
}

TEST(KvPlanner, SizesOnlyWithoutMemory) {
  auto plan = plan_capacity(tiny(), {}, all_kv_dtypes());
  ASSERT_TRUE(plan.is_ok());
  ASSERT_EQ(plan->rows.size(), 7u);
  for (const KvPlanRow& r : plan->rows) {
    EXPECT_FALSE(r.has_capacity);
    EXPECT_EQ(r.max_sequences, 0);
  }
  EXPECT_EQ(plan->context, kDefaultPlanContext);
  KvModelSpec s = tiny();
  s.max_context = 2048;
  EXPECT_EQ(plan_capacity(s, {}, {KvDType::kF16})->context, 2048);
}

TEST(KvPlanner, DefaultOverheadIsFivePercentOfMemory) {
  KvPlanOptions o;
  o.mem_bytes = 1'000'000;
  o.weight_bytes = 100'000;
  auto plan = plan_capacity(tiny(), o, {KvDType::kF32});
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->overhead_bytes, 50'000);
  EXPECT_EQ(plan->available_bytes, 850'000);
  // The spec's weights are used when the options give none.
  KvModelSpec s = tiny();
  s.weight_bytes = 200'000;
  o.weight_bytes.reset();
  EXPECT_EQ(plan_capacity(s, o, {KvDType::kF32})->available_bytes, 750'000);
}

TEST(KvPlanner, SlidingWindowCapsPerSequenceKv) {
  // Mistral-7B in f16 at 32768 tokens, 80 GiB all for KV: 2 MiB per block of 16 tokens.
  KvModelSpec windowed = preset("mistral-7b");
  KvModelSpec full = windowed;
  full.sliding_window = 0;
  KvPlanOptions o;
  o.mem_bytes = int64_t{80} << 30;
  o.weight_bytes = 0;
  o.overhead_bytes = 0;
  o.context = 32768;
  const KvPlanRow f = row_for(full, KvDType::kF16, o);
  const KvPlanRow w = row_for(windowed, KvDType::kF16, o);
  EXPECT_EQ(f.bytes_per_sequence, int64_t{2048} * 2097152);  // 4 GiB
  EXPECT_EQ(f.max_sequences, 20);
  // The last 4096 tokens straddle ceil(4095 / 16) + 1 = 257 blocks.
  EXPECT_EQ(w.sliding_blocks_per_sequence, 257);
  EXPECT_EQ(w.bytes_per_sequence, int64_t{257} * 2097152);
  EXPECT_EQ(w.max_sequences, 159);  // 85899345920 / 538968064
  EXPECT_EQ(w.max_cached_tokens, f.max_cached_tokens);  // the pool itself is the same size
  // Below the window, the window changes nothing.
  o.context = 1000;
  EXPECT_EQ(row_for(windowed, KvDType::kF16, o).bytes_per_sequence, row_for(full, KvDType::kF16, o).bytes_per_sequence);
}

TEST(KvPlanner, SlidingWindowOnSomeLayers) {
  KvModelSpec s = tiny();  // 128 B per layer-block (f32, 4-token blocks)
  s.n_layer = 4;
  s.sliding_window = 8;
  s.layer_is_sliding = {true, false, true, false};
  EXPECT_EQ(s.num_sliding_layers(), 2);
  KvPlanOptions o;
  o.block_size = 4;
  o.mem_bytes = 100'000;
  o.weight_bytes = 0;
  o.overhead_bytes = 0;
  o.context = 100;
  const KvPlanRow r = row_for(s, KvDType::kF32, o);
  EXPECT_EQ(r.full_bytes_per_block, 256);
  EXPECT_EQ(r.sliding_bytes_per_block, 256);
  EXPECT_EQ(r.full_blocks_per_sequence, 25);
  EXPECT_EQ(r.sliding_blocks_per_sequence, 3);  // ceil(7 / 4) + 1
  EXPECT_EQ(r.bytes_per_sequence, 256 * 25 + 256 * 3);
  EXPECT_EQ(r.max_sequences, 100'000 / (256 * 28));
}

TEST(KvPlanner, ErrorsAreClear) {
  KvPlanOptions o;
  o.mem_bytes = 1 << 20;
  o.weight_bytes = 2 << 20;
  auto no_room = plan_capacity(tiny(), o, {KvDType::kF16});
  ASSERT_FALSE(no_room.is_ok());
  EXPECT_NE(no_room.status().message().find("no memory left for the KV cache"), std::string::npos)
      << no_room.status().message();

  KvModelSpec odd = tiny();
  odd.head_dim = 5;
  EXPECT_FALSE(check_kv_dtype(odd, KvDType::kInt4).is_ok());
  EXPECT_TRUE(check_kv_dtype(odd, KvDType::kInt8).is_ok());
  auto int4 = plan_capacity(odd, {}, {KvDType::kInt4});
  ASSERT_FALSE(int4.is_ok());
  EXPECT_NE(int4.status().message().find("even"), std::string::npos);

  KvModelSpec bad = tiny();
  bad.sliding_window = 4;
  bad.layer_is_sliding = {true};
  EXPECT_FALSE(plan_capacity(bad, {}, {KvDType::kF16}).is_ok());
  bad = tiny();
  bad.layer_is_sliding = {true, false};  // sliding layers without a window
  EXPECT_FALSE(bad.validate().is_ok());
  bad = tiny();
  bad.n_kv_head = 0;
  EXPECT_FALSE(plan_capacity(bad, {}, {KvDType::kF16}).is_ok());
  KvPlanOptions big_block;
  big_block.block_size = 0;
  EXPECT_FALSE(plan_capacity(tiny(), big_block, {KvDType::kF16}).is_ok());
  EXPECT_FALSE(plan_capacity(tiny(), {}, {}).is_ok());
  KvPlanOptions huge;
  huge.context = int64_t{1} << 62;
  huge.block_size = 1;
  EXPECT_FALSE(plan_capacity(preset("llama-2-70b"), huge, {KvDType::kF32}).is_ok());
}

TEST(KvPlanner, PresetsAreValidAndFoundByName) {
  const auto presets = kv_model_presets();
  ASSERT_GE(presets.size(), 8u);
  for (const KvModelSpec& s : presets) {
    EXPECT_TRUE(s.validate().is_ok()) << s.name << ": " << s.validate().message();
    EXPECT_GT(s.weight_bytes, 0) << s.name;
    EXPECT_GT(s.max_context, 0) << s.name;
    EXPECT_TRUE(plan_capacity(s, {}, all_kv_dtypes()).is_ok()) << s.name;
  }
  EXPECT_TRUE(find_kv_model_preset("Llama-3-8B").has_value());
  EXPECT_FALSE(find_kv_model_preset("llama-9-1t").has_value());
  EXPECT_EQ(preset("llama-3-8b").weight_bytes, int64_t{8'030'261'248} * 2);
  EXPECT_EQ(preset("llama-2-70b").attention_kind(), "GQA");
  EXPECT_EQ(preset("llama-2-7b").attention_kind(), "MHA");
  EXPECT_EQ(preset("gemma-2-9b").num_sliding_layers(), 21);
}

}  // namespace
}  // namespace pagoda::kvcache
