// k-quant model files: llama.cpp's Q4_K_M / Q5_K_M type rules, loading, and bad k-quant tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/format/gguf.h"
#include "model/llama_model.h"
#include "model/model_factory.h"

namespace pagoda::model {
namespace {

std::string type_of(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  return t == nullptr ? "missing" : ggml_type_name(t->ggml_type);
}

TEST(KQuantMix, Q4KMFollowsLlamaCppRulesOnTinyllamaLayers) {
  auto mix = find_weight_mix("q4_k_m");
  ASSERT_TRUE(mix.is_ok());
  EXPECT_EQ(mix->file_type, 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  // 22 layers: n/8 = 2, 7n/8 = 19; more bits: 0, 1, then (i - 2) % 3 == 2, then 19..21.
  const std::vector<int> more_bits = {0, 1, 4, 7, 10, 13, 16, 19, 20, 21};
  for (int i = 0; i < 22; ++i) {
    const bool more = std::find(more_bits.begin(), more_bits.end(), i) != more_bits.end();
    const std::string p = "blk." + std::to_string(i) + ".";
    const DType want = more ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(weight_dtype(*mix, p + "attn_v.weight", 2048, 22), want) << i;
    EXPECT_EQ(weight_dtype(*mix, p + "ffn_down.weight", 5632, 22), want) << i;
    EXPECT_EQ(weight_dtype(*mix, p + "attn_q.weight", 2048, 22), DType::kQ4_K) << i;
    EXPECT_EQ(weight_dtype(*mix, p + "ffn_up.weight", 2048, 22), DType::kQ4_K) << i;
  }
  EXPECT_EQ(weight_dtype(*mix, "output.weight", 2048, 22), DType::kQ6_K);
  EXPECT_EQ(weight_dtype(*mix, "token_embd.weight", 2048, 22), DType::kQ4_K);
  // Rows that are not a multiple of 256 fall back to Q8_0.
  EXPECT_EQ(weight_dtype(*mix, "blk.0.attn_q.weight", 64, 2), DType::kQ8_0);
  EXPECT_EQ(weight_dtype(*mix, "output.weight", 96, 2), DType::kQ8_0);
  auto q5 = find_weight_mix("q5_k_m");
  ASSERT_TRUE(q5.is_ok());
  EXPECT_EQ(weight_dtype(*q5, "blk.3.attn_q.weight", 2048, 22), DType::kQ5_K);
  EXPECT_EQ(weight_dtype(*q5, "blk.4.ffn_down.weight", 5632, 22), DType::kQ6_K);
  auto pure = find_weight_mix("q4_k");
  ASSERT_TRUE(pure.is_ok());
  EXPECT_EQ(weight_dtype(*pure, "output.weight", 2048, 22), DType::kQ4_K);
  EXPECT_FALSE(find_weight_mix("q3_k_m").is_ok());
}

TEST(KQuantMix, RandomQ4KMModelHasTheMixAndLoads) {
  auto shape = find_model_shape("default");  // 4 layers: more bits in layers 2 and 3
  ASSERT_TRUE(shape.is_ok());
  auto mix = find_weight_mix("q4_k_m");
  ASSERT_TRUE(mix.is_ok());
  auto file = make_random_model(*shape, *mix, 5);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  EXPECT_EQ(type_of(*file, "token_embd.weight"), "q4_K");
  EXPECT_EQ(type_of(*file, "output.weight"), "q6_K");
  EXPECT_EQ(type_of(*file, "blk.0.attn_v.weight"), "q4_K");
  EXPECT_EQ(type_of(*file, "blk.2.attn_v.weight"), "q6_K");
  EXPECT_EQ(type_of(*file, "blk.3.ffn_down.weight"), "q6_K");
  EXPECT_EQ(type_of(*file, "blk.1.ffn_gate.weight"), "q4_K");
  EXPECT_EQ(type_of(*file, "blk.1.attn_norm.weight"), "f32");
  EXPECT_EQ(file->get_int("general.file_type"), 15);
  // Through the GGUF bytes, as a file on disk would be read.
  const std::vector<uint8_t> bytes = file->to_bytes();
  auto parsed = GgufFile::parse(bytes.data(), bytes.size(), "q4_k_m.gguf");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  auto model = LlamaModel::load(std::move(parsed).value());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
}

TEST(KQuantMix, TruncatedAndMisshapenKQuantTensorsAreClearErrors) {
  auto shape = find_model_shape("default");
  auto file = make_random_model(*shape, DType::kQ6_K, 5);
  ASSERT_TRUE(file.is_ok());
  const std::vector<uint8_t> bytes = file->to_bytes();
  // Cut inside output.weight (the last tensor): its data no longer fits the file.
  auto cut = GgufFile::parse(bytes.data(), bytes.size() - 1000, "cut.gguf");
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("output.weight"), std::string::npos) << cut.status().message();
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();
  // A q4_K row must hold whole 256-value super-blocks.
  GgufFile f;
  std::vector<uint8_t> data(144 * 2);
  Status s = f.add_tensor("w", {128, 4}, kGgmlTypeQ4_K, data.data(), data.size());
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("256"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace pagoda::model
