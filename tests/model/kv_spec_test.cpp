#include "model/kv_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kernels/kv_format.h"
#include "model/format/gguf.h"
#include "test_data.h"

namespace pagoda::model {
namespace {

// KV bytes per token the way the engine and planner size them (kernels/kv_format.h), 16-token blocks.
int64_t bytes_per_token(const KvSpec& s, kernels::KvDType d) {
  const int64_t per_layer = kernels::kv_block_bytes_k(d, s.head_dim, 16, s.n_kv_head) +
                            kernels::kv_block_bytes_v(d, s.head_dim, 16, s.n_kv_head);
  return s.n_layer * per_layer / 16;
}

std::string expect_error(const Result<KvSpec>& r) {
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? std::string() : r.status().message();
}

TEST(KvSpec, StoriesGgufShape) {
  const std::string path = testing::stories_dir() + "/stories260K.gguf";
  auto spec = read_kv_spec(path);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  EXPECT_EQ(spec->format, "GGUF");
  EXPECT_EQ(spec->architecture, "llama");
  EXPECT_EQ(spec->n_layer, 5);
  EXPECT_EQ(spec->n_head, 8);
  EXPECT_EQ(spec->n_kv_head, 4);
  EXPECT_EQ(spec->head_dim, 8);
  EXPECT_EQ(spec->sliding_window, 0);
  EXPECT_EQ(bytes_per_token(*spec, kernels::KvDType::kF32), 1280);  // 2 x 5 x 4 x 8 x 4
  EXPECT_EQ(bytes_per_token(*spec, kernels::KvDType::kF16), 640);
  auto file = GgufFile::read_metadata_only(path);
  ASSERT_TRUE(file.is_ok());
  int64_t total = 0;
  for (const auto& t : file->tensors()) total += static_cast<int64_t>(t.bytes);
  EXPECT_GT(total, 0);
  EXPECT_EQ(spec->weight_bytes, total);
}

GgufFile generic_gguf(const std::string& arch) {
  GgufFile f;
  f.set("general.architecture", GgufValue::of_string(arch));
  f.set(arch + ".block_count", GgufValue::of_u32(6));
  f.set(arch + ".attention.head_count", GgufValue::of_u32(8));
  f.set(arch + ".attention.head_count_kv", GgufValue::of_u32(2));
  f.set(arch + ".embedding_length", GgufValue::of_u32(512));
  f.set(arch + ".context_length", GgufValue::of_u32(8192));
  return f;
}

TEST(KvSpec, GgufSlidingWindowsAndPatterns) {
  GgufFile f = generic_gguf("gemma2");
  f.set("gemma2.attention.key_length", GgufValue::of_u32(128));
  f.set("gemma2.attention.sliding_window", GgufValue::of_u32(4096));
  auto s = kv_spec_from_gguf(f);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->head_dim, 128);
  EXPECT_EQ(s->n_kv_head, 2);
  EXPECT_EQ(s->max_context, 8192);
  EXPECT_EQ(s->sliding_window, 4096);
  EXPECT_EQ(s->layer_is_sliding, (std::vector<bool>{true, false, true, false, true, false}));

  f.set("gemma2.attention.sliding_window_pattern", GgufValue::of_u32(3));
  EXPECT_EQ(kv_spec_from_gguf(f)->layer_is_sliding, (std::vector<bool>{true, true, false, true, true, false}));

  GgufFile m = generic_gguf("mistral3");
  m.set("mistral3.attention.sliding_window", GgufValue::of_u32(1024));
  auto ms = kv_spec_from_gguf(m);
  ASSERT_TRUE(ms.is_ok()) << ms.status().message();
  EXPECT_EQ(ms->head_dim, 64);  // 512 / 8
  EXPECT_EQ(ms->sliding_window, 1024);
  EXPECT_TRUE(ms->layer_is_sliding.empty());  // every layer
}

TEST(KvSpec, GgufMlaAndPerLayerHeads) {
  GgufFile f = generic_gguf("deepseek2");
  f.set("deepseek2.attention.kv_lora_rank", GgufValue::of_u32(512));
  f.set("deepseek2.rope.dimension_count", GgufValue::of_u32(64));
  auto s = kv_spec_from_gguf(f);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->kv_lora_rank, 512);
  EXPECT_EQ(s->qk_rope_head_dim, 64);

  GgufFile g = generic_gguf("openelm");
  g.set("openelm.attention.head_count_kv", GgufValue::i32_array({2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(kv_spec_from_gguf(g)->n_kv_head, 2);
  g.set("openelm.attention.head_count_kv", GgufValue::i32_array({2, 2, 4, 4, 8, 8}));
  EXPECT_NE(expect_error(kv_spec_from_gguf(g)).find("differs between layers"), std::string::npos);

  GgufFile bad = generic_gguf("phi9");
  bad.erase("phi9.block_count");
  EXPECT_NE(expect_error(kv_spec_from_gguf(bad)).find("phi9.block_count"), std::string::npos);
  GgufFile none;
  EXPECT_NE(expect_error(kv_spec_from_gguf(none)).find("general.architecture"), std::string::npos);
}

// Published Hugging Face configs (meta-llama/Meta-Llama-3-8B, mistralai/Mistral-7B-v0.1,
// Qwen/Qwen2.5-7B-Instruct), trimmed of keys that play no part.
constexpr const char* kLlama3_8b = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 128256})";
constexpr const char* kMistral7b = R"({
  "architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})";
constexpr const char* kQwen25_7b = R"({
  "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
  "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2",
  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_sliding_window": false, "vocab_size": 152064})";

TEST(KvSpec, HfConfigLlama3) {
  auto s = kv_spec_from_hf_config(kLlama3_8b, "Meta-Llama-3-8B");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->format, "config.json");
  EXPECT_EQ(s->name, "Meta-Llama-3-8B");
  EXPECT_EQ(s->architecture, "llama");
  EXPECT_EQ(s->n_layer, 32);
  EXPECT_EQ(s->n_head, 32);
  EXPECT_EQ(s->n_kv_head, 8);
  EXPECT_EQ(s->head_dim, 128);  // 4096 / 32
  EXPECT_EQ(s->max_context, 8192);
  EXPECT_EQ(s->sliding_window, 0);
  EXPECT_EQ(bytes_per_token(*s, kernels::KvDType::kF16), 131072);
  EXPECT_EQ(s->weight_bytes, int64_t{8'030'261'248} * 2);  // the published 8.03B parameters, bf16
}

TEST(KvSpec, HfConfigWindows) {
  auto mistral = kv_spec_from_hf_config(kMistral7b, "m");
  ASSERT_TRUE(mistral.is_ok()) << mistral.status().message();
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_TRUE(mistral->layer_is_sliding.empty());  // every layer
  EXPECT_EQ(mistral->weight_bytes, int64_t{7'241'732'096} * 2);

  auto qwen = kv_spec_from_hf_config(kQwen25_7b, "q");
  ASSERT_TRUE(qwen.is_ok()) << qwen.status().message();
  EXPECT_EQ(qwen->sliding_window, 0);  // use_sliding_window: false
  EXPECT_EQ(bytes_per_token(*qwen, kernels::KvDType::kF16), 57344);
  EXPECT_EQ(qwen->weight_bytes, int64_t{7'615'616'512} * 2);  // q/k/v biases included

  const std::string qwen_swa = R"({"model_type": "qwen2", "num_hidden_layers": 4, "num_attention_heads": 4,
    "hidden_size": 256, "use_sliding_window": true, "sliding_window": 512, "max_window_layers": 2})";
  auto q2 = kv_spec_from_hf_config(qwen_swa, "q2");
  ASSERT_TRUE(q2.is_ok()) << q2.status().message();
  EXPECT_EQ(q2->layer_is_sliding, (std::vector<bool>{false, false, true, true}));

  const std::string layer_types = R"({"model_type": "gemma3_text", "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 1024, "sliding_window_pattern": 6,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})";
  auto g3 = kv_spec_from_hf_config(layer_types, "g3");
  ASSERT_TRUE(g3.is_ok()) << g3.status().message();
  EXPECT_EQ(g3->layer_is_sliding, (std::vector<bool>{true, false, true}));  // layer_types win
  EXPECT_EQ(g3->head_dim, 256);

  // Gemma 2 (no layer_types in its published config): even layers slide. Tied embeddings.
  const std::string gemma2 = R"({"model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 256, "hidden_size": 3584, "intermediate_size": 14336,
    "vocab_size": 256000, "sliding_window": 4096, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"})";
  auto g2 = kv_spec_from_hf_config(gemma2, "g2");
  ASSERT_TRUE(g2.is_ok()) << g2.status().message();
  ASSERT_EQ(g2->layer_is_sliding.size(), 42u);
  EXPECT_TRUE(g2->layer_is_sliding[0]);
  EXPECT_FALSE(g2->layer_is_sliding[1]);
  EXPECT_EQ(g2->weight_bytes, int64_t{9'241'705'984} * 2);

  const std::string null_window = R"({"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 8,
    "sliding_window": null})";
  EXPECT_EQ(kv_spec_from_hf_config(null_window, "n")->sliding_window, 0);
}

TEST(KvSpec, HfConfigMlaAndMultimodal) {
  const std::string deepseek_v3 = R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "num_attention_heads": 128, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "quantization_config": {"quant_method": "fp8"}, "torch_dtype": "bfloat16", "vocab_size": 129280})";
  auto ds = kv_spec_from_hf_config(deepseek_v3, "DeepSeek-V3");
  ASSERT_TRUE(ds.is_ok()) << ds.status().message();
  EXPECT_EQ(ds->n_layer, 61);
  EXPECT_EQ(ds->kv_lora_rank, 512);
  EXPECT_EQ(ds->qk_rope_head_dim, 64);
  EXPECT_EQ(ds->max_context, 163840);
  EXPECT_EQ(ds->weight_bytes, 0);  // fp8 MoE: no estimate, and the reason is given
  EXPECT_FALSE(ds->weight_source.empty());

  const std::string wrapped = R"({"model_type": "gemma3", "torch_dtype": "bfloat16",
    "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 34, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072}})";
  auto mm = kv_spec_from_hf_config(wrapped, "gemma-3-4b");
  ASSERT_TRUE(mm.is_ok()) << mm.status().message();
  EXPECT_EQ(mm->n_layer, 34);
  EXPECT_EQ(mm->n_kv_head, 4);
  EXPECT_EQ(mm->max_context, 131072);
}

TEST(KvSpec, HfConfigErrorsNameTheProblem) {
  EXPECT_NE(expect_error(kv_spec_from_hf_config("{\"num_hidden_layers\": 32,", "x")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config("[1, 2]", "x")).find("JSON object"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config(R"({"num_attention_heads": 8, "head_dim": 64})", "x"))
                .find("num_hidden_layers"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config(R"({"num_hidden_layers": "32", "num_attention_heads": 8})", "x"))
                .find("'num_hidden_layers' must be an integer"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config(R"({"num_hidden_layers": 2, "num_attention_heads": 8})", "x"))
                .find("head size"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config(R"({"num_hidden_layers": 0, "num_attention_heads": 8, "head_dim": 8})", "x"))
                .find("implausible"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config(R"({"num_hidden_layers": 3, "num_attention_heads": 8, "head_dim": 8,
      "sliding_window": 64, "layer_types": ["full_attention"]})", "x")).find("layer_types"), std::string::npos);
  EXPECT_NE(expect_error(kv_spec_from_hf_config(R"({"num_hidden_layers": 1, "num_attention_heads": 8, "head_dim": 8,
      "kv_lora_rank": 512})", "x")).find("qk_rope_head_dim"), std::string::npos);
}

TEST(KvSpec, ReadsConfigJsonFromADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda-kvspec-" + std::to_string(getpid())) / "Mistral-7B-v0.1";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << kMistral7b;
  auto s = read_kv_spec(dir.string());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->name, "Mistral-7B-v0.1");  // no _name_or_path: the directory's name
  EXPECT_EQ(s->sliding_window, 4096);
  std::ofstream(dir / "config.json") << "{ broken";
  EXPECT_NE(expect_error(read_kv_spec((dir / "config.json").string())).find("config.json: not valid JSON"), std::string::npos);
  EXPECT_NE(expect_error(read_kv_spec("/nonexistent/config.json")).find("cannot open"), std::string::npos);
  std::filesystem::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace pagoda::model
