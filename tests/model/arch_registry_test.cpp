// The architecture registry (model/arch/registry.h): every name a file can carry maps to one
// entry, the runnable ones round-trip through their Arch, and an unsupported GGUF is refused
// from its metadata alone.
#include "model/arch/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model/format/gguf.h"
#include "model/model_config.h"

namespace pagoda::model::arch {
namespace {

TEST(ArchRegistry, EveryNameMapsToOneEntry) {
  std::set<std::string_view> gguf, classes, types;
  for (const ArchInfo& a : architectures()) {
    if (!a.gguf_name.empty()) {
      EXPECT_TRUE(gguf.insert(a.gguf_name).second) << a.gguf_name;
      EXPECT_EQ(find_gguf(a.gguf_name), &a);
    }
    for (std::string_view c : a.hf_classes) {
      EXPECT_TRUE(classes.insert(c).second) << c;
      EXPECT_EQ(find_hf_class(c), &a);
      EXPECT_TRUE(a.arch.has_value()) << c << ": an HF class Pagoda reads must be runnable";
    }
    for (std::string_view t : a.hf_model_types) {
      EXPECT_TRUE(types.insert(t).second) << t;
      EXPECT_EQ(find_hf_model_type(t), &a);
    }
    if (a.arch) {
      EXPECT_EQ(&info(*a.arch), &a);
      EXPECT_FALSE(a.gguf_name.empty());
    }
  }
  EXPECT_EQ(find_gguf(""), nullptr);
  EXPECT_EQ(find_gguf("gpt2"), nullptr);
  EXPECT_EQ(find_hf_class("GPT2LMHeadModel"), nullptr);
}

TEST(ArchRegistry, RunnableFamiliesAndTheirTraits) {
  for (Arch arch : {Arch::kLlama, Arch::kQwen2, Arch::kQwen3, Arch::kDeepseek2, Arch::kGemma3}) {
    EXPECT_EQ(info(arch).arch, arch);
  }
  EXPECT_EQ(runnable_gguf_names(), "llama, qwen2, qwen3, deepseek2, gemma3, qwen3moe");
  EXPECT_EQ(runnable_hf_classes(),
            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, Qwen3MoeForCausalLM");
  EXPECT_TRUE(info(Arch::kQwen2).qkv_bias);
  EXPECT_TRUE(info(Arch::kQwen3).qk_norm);
  EXPECT_TRUE(info(Arch::kDeepseek2).mla && info(Arch::kDeepseek2).yarn);
  EXPECT_TRUE(info(Arch::kLlama).convert_permutes_qk);
  EXPECT_EQ(info(Arch::kQwen2).gguf_rope, kernels::RopeStyle::kNeoxHalves);
  EXPECT_EQ(info(Arch::kLlama).gguf_rope, kernels::RopeStyle::kAdjacentPairs);
  EXPECT_EQ(info(Arch::kGemma3).default_sliding_pattern, 6);
  EXPECT_TRUE(info(Arch::kGemma3).qk_norm && info(Arch::kGemma3).read_gguf && info(Arch::kGemma3).write_random);
  EXPECT_EQ(info(Arch::kGemma3).gguf_rope, kernels::RopeStyle::kNeoxHalves);
  // Known to kvcalc, not runnable.
  ASSERT_NE(find_gguf("gemma2"), nullptr);
  EXPECT_FALSE(find_gguf("gemma2")->arch.has_value());
  EXPECT_EQ(find_hf_model_type("gemma2")->default_sliding_pattern, 2);
}

TEST(ArchRegistry, CheckRunnableReadsOnlyTheHeader) {
  GgufFile f;
  EXPECT_NE(check_runnable(f).status().message().find("missing metadata key 'general.architecture'"),
            std::string::npos);
  f.set("general.architecture", GgufValue::of_string("gpt-oss"));
  auto refused = check_runnable(f);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message(),
            "unsupported architecture 'gpt-oss' (supported: llama, qwen2, qwen3, deepseek2, gemma3, qwen3moe)");
  f.set("general.architecture", GgufValue::of_string("gemma2"));  // known to kvcalc only
  EXPECT_FALSE(check_runnable(f).is_ok());
  f.set("general.architecture", GgufValue::of_string("qwen2"));
  auto ok = check_runnable(f);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ((*ok)->arch, Arch::kQwen2);
}

}  // namespace
}  // namespace pagoda::model::arch
