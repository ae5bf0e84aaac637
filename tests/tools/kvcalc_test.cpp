// End-to-end tests of `pagoda kvcalc`: what a user types and what they read back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_data.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using nlohmann::json;

using testing::Output;
using testing::pagoda;
using testing::temp_dir;

json run_json(const std::string& args) {
  Output o = pagoda(args + " --json");
  EXPECT_EQ(o.exit_code, 0) << args << "\n" << o.err;
  json j = json::parse(o.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << o.out;
  return j;
}

const json& row(const json& j, const std::string& dtype) {
  static const json kNone;
  for (const json& r : j["rows"]) {
    if (r["dtype"] == dtype) return r;
  }
  ADD_FAILURE() << "no row for " << dtype << " in " << j.dump();
  return kNone;
}

void expect_error(const Output& o, const std::string& needle) {
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_EQ(o.err.rfind("error: ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find(needle), std::string::npos) << "want '" << needle << "' in: " << o.err;
}

TEST(Kvcalc, PresetSizesForEveryFormat) {
  json j = run_json("kvcalc llama-3-8b");
  EXPECT_EQ(j["model"]["attention"], "GQA");
  EXPECT_EQ(j["context"], 8192);  // the model's context
  EXPECT_TRUE(j["budget"].is_null());
  ASSERT_EQ(j["rows"].size(), 7u);
  EXPECT_EQ(row(j, "f32")["bytes_per_token"], 262144);
  EXPECT_EQ(row(j, "f16")["bytes_per_token"], 131072);
  EXPECT_EQ(row(j, "f16")["bytes_per_block"], 131072 * 16);
  EXPECT_EQ(row(j, "int8")["bytes_per_token"], 66560);  // 32 x 8 x 2 x (128 + 2)
  EXPECT_EQ(row(j, "int4")["bytes_per_token"], 41984);  // 32 x 8 x (96 + 68)
  EXPECT_FALSE(row(j, "f16").contains("max_sequences"));
  EXPECT_EQ(run_json("kvcalc deepseek-v3 --kv-dtype f16")["rows"][0]["bytes_per_token"], 70272);
  EXPECT_EQ(run_json("kvcalc llama-2-70b --kv-dtype f16")["rows"][0]["bytes_per_token"], 327680);
  EXPECT_EQ(run_json("kvcalc llama-3-8b --kv-dtype f16 --block-size 32")["rows"][0]["bytes_per_block"], 131072 * 32);
}

TEST(Kvcalc, CapacityInA24GBudget) {
  // 24 GiB - 16,060,522,496 weights (8.03B x 2) - 5% = 8,420,791,092 B for KV; 2 MiB blocks.
  json j = run_json("kvcalc llama-3-8b --mem 24G --context 8192 --kv-dtype f16,int8");
  EXPECT_EQ(j["budget"]["mem_bytes"], int64_t{24} << 30);
  EXPECT_EQ(j["budget"]["weight_bytes"], int64_t{16'060'522'496});
  EXPECT_EQ(j["budget"]["overhead_bytes"], int64_t{1'288'490'188});
  EXPECT_EQ(j["budget"]["available_bytes"], int64_t{8'420'791'092});
  ASSERT_EQ(j["rows"].size(), 2u);
  const json& f16 = row(j, "f16");
  EXPECT_EQ(f16["num_blocks"], 4015);
  EXPECT_EQ(f16["max_cached_tokens"], 64240);
  EXPECT_EQ(f16["bytes_per_sequence"], int64_t{1} << 30);
  EXPECT_EQ(f16["max_sequences"], 7);
  EXPECT_EQ(row(j, "int8")["max_sequences"], 15);  // 8420791092 / (512 x 1064960)

  Output text = pagoda("kvcalc llama-3-8b --mem 24G --context 8192");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* s : {"llama-3-8b (preset)", "8 kv heads (GQA)", "bytes/token", "max seqs", "131072", "64240"}) {
    EXPECT_NE(text.out.find(s), std::string::npos) << s << " in\n" << text.out;
  }
}

TEST(Kvcalc, SlidingWindowFitsMoreSequences) {
  const std::string budget = " --mem 80G --weights 0 --overhead 0 --context 32768 --kv-dtype f16";
  json full = run_json("kvcalc llama-3-8b" + budget);     // same KV shape, no window
  json windowed = run_json("kvcalc mistral-7b" + budget);  // 4096-token window on every layer
  EXPECT_EQ(full["rows"][0]["max_sequences"], 20);
  EXPECT_EQ(windowed["rows"][0]["max_sequences"], 159);  // 257 blocks of 2 MiB per sequence
  EXPECT_EQ(windowed["model"]["sliding_window"], 4096);
  Output text = pagoda("kvcalc mistral-7b");
  EXPECT_NE(text.out.find("window    4096 tokens on 32 of 32 layers"), std::string::npos) << text.out;
}

TEST(Kvcalc, OverheadAsPercentOrBytes) {
  json pct = run_json("kvcalc llama-3-8b --mem 100G --overhead 10% --kv-dtype f16");
  EXPECT_EQ(pct["budget"]["overhead_bytes"], int64_t{10} << 30);
  json bytes = run_json("kvcalc llama-3-8b --mem 100G --overhead 1G --weights 10G --kv-dtype f16");
  EXPECT_EQ(bytes["budget"]["available_bytes"], int64_t{89} << 30);
}

TEST(Kvcalc, StoriesGguf) {
  const std::string model = testing::stories_dir() + "/stories260K.gguf";
  json j = run_json("kvcalc " + model + " --mem 64M");
  EXPECT_EQ(j["model"]["source"], "GGUF");
  EXPECT_EQ(j["model"]["n_layer"], 5);
  EXPECT_EQ(row(j, "f32")["bytes_per_token"], 1280);
  EXPECT_EQ(row(j, "f16")["bytes_per_token"], 640);
  EXPECT_GT(j["budget"]["weight_bytes"].get<int64_t>(), 0);  // the file's tensor bytes
  EXPECT_GT(row(j, "f16")["max_sequences"].get<int64_t>(), 0);
}

TEST(Kvcalc, HfConfigJson) {
  const std::string dir = temp_dir() + "/Meta-Llama-3-8B";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";
  json j = run_json("kvcalc " + dir + " --mem 24G --context 8192 --kv-dtype f16");
  EXPECT_EQ(j["model"]["name"], "Meta-Llama-3-8B");
  EXPECT_EQ(j["model"]["source"], "config.json");
  EXPECT_EQ(j["budget"]["weight_bytes"], int64_t{16'060'522'496});  // estimated from the config
  EXPECT_EQ(row(j, "f16")["max_sequences"], 7);                     // same as the preset

  const std::string ds = temp_dir() + "/deepseek.json";
  std::ofstream(ds) << R"({"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "hidden_size": 7168, "n_routed_experts": 256,
    "torch_dtype": "bfloat16", "max_position_embeddings": 163840})";
  EXPECT_EQ(run_json("kvcalc " + ds + " --kv-dtype f16")["rows"][0]["bytes_per_token"], 70272);
  expect_error(pagoda("kvcalc " + ds + " --mem 80G"), "--weights");
  json kv_only = run_json("kvcalc " + ds + " --mem 80G --weights 0 --overhead 0 --context 4096 --kv-dtype f16");
  EXPECT_EQ(row(kv_only, "f16")["max_sequences"], (int64_t{80} << 30) / (int64_t{256} * 16 * 70272));

  const std::string broken = temp_dir() + "/broken.json";
  std::ofstream(broken) << "{\"num_hidden_layers\": ";
  expect_error(pagoda("kvcalc " + broken), "not valid JSON");
}

TEST(Kvcalc, ListPresets) {
  Output o = pagoda("kvcalc --list-presets");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  for (const char* name : {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b",
                           "qwen2.5-7b", "deepseek-v3"}) {
    EXPECT_NE(o.out.find(name), std::string::npos) << name;
  }
  json j = run_json("kvcalc --list-presets");
  ASSERT_TRUE(j.is_array());
  EXPECT_GE(j.size(), 8u);
}

TEST(Kvcalc, ErrorsAreClear) {
  expect_error(pagoda("kvcalc llama-9-1t"), "neither a file nor a preset");
  expect_error(pagoda("kvcalc llama-9-1t"), "llama-3-8b");  // the presets are listed
  expect_error(pagoda("kvcalc /nonexistent/config.json"), "/nonexistent/config.json: no such file");
  expect_error(pagoda("kvcalc llama-3-8b --kv-dtype f16,q3"), "unknown KV dtype 'q3'");
  expect_error(pagoda("kvcalc llama-3-8b --mem lots"), "byte size");
  expect_error(pagoda("kvcalc llama-3-70b --mem 24G"), "no memory left for the KV cache");
  expect_error(pagoda("kvcalc llama-3-8b --mem 24G --overhead 120%"), "--overhead");
  expect_error(pagoda("kvcalc llama-3-8b --block-size 0"), "block size");
  expect_error(pagoda("kvcalc"), "give a model");
}

}  // namespace
}  // namespace pagoda
