// `pagoda convert DIR -o OUT.gguf` from Hugging Face folders, generation_config.json's EOS ids,
// and progress bars (drawn on a terminal only).
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "hf_writer.h"
#include "model/format/gguf.h"
#include "model/model_factory.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing::Output;
using testing::pagoda;

// A random GGUF model and the HF folder written from it (with a byte-level tokenizer).
struct Folder {
  model::GgufFile gguf;
  std::string dir;
};

Folder make_folder(const std::string& name, const std::string& arch, const std::string& dtype) {
  Folder f;
  f.dir = testing::temp_dir() + "/" + name;
  std::filesystem::remove_all(f.dir);
  model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 128, arch};
  f.gguf = std::move(model::make_random_model(shape, DType::kF32, 3)).value();
  testing::write_hf_folder(f.gguf, f.dir, {.dtype = dtype});
  testing::write_byte_level_tokenizer(f.dir);
  return f;
}

// The same from one of make-model's shapes (its own architecture and keys).
Folder shape_folder(const std::string& name, const std::string& shape) {
  Folder f;
  f.dir = testing::temp_dir() + "/" + name;
  std::filesystem::remove_all(f.dir);
  f.gguf = std::move(model::make_random_model(model::find_model_shape(shape).value(), DType::kF32, 3)).value();
  testing::write_hf_folder(f.gguf, f.dir);
  testing::write_byte_level_tokenizer(f.dir);
  return f;
}

// `pagoda convert` of f.dir to OUT, read back (nullopt, with a failure, if either step fails).
std::optional<model::GgufFile> convert_folder(const Folder& f, const std::string& out) {
  Output o = pagoda("convert " + f.dir + " -o " + out + " --quiet");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  auto converted = model::GgufFile::read(out);
  EXPECT_TRUE(converted.is_ok()) << converted.status().message();
  if (o.exit_code != 0 || !converted.is_ok()) return std::nullopt;
  return std::move(converted).value();
}

// Every tensor of `original` is in `converted` with the same dims and bytes, and the same
// values: byte for byte (tolerance 0) or, f32, within `tolerance`.
void expect_same_tensors(const model::GgufFile& original, const model::GgufFile& converted, double tolerance = 0) {
  for (const model::GgufTensorInfo& t : original.tensors()) {
    const model::GgufTensorInfo* c = converted.find_tensor(t.name);
    ASSERT_NE(c, nullptr) << t.name;
    EXPECT_EQ(c->dims, t.dims) << t.name;
    ASSERT_EQ(c->bytes, t.bytes) << t.name;
    if (tolerance == 0) {
      EXPECT_EQ(std::memcmp(converted.tensor_data(*c), original.tensor_data(t), t.bytes), 0) << t.name;
      continue;
    }
    const auto* a = reinterpret_cast<const float*>(converted.tensor_data(*c));
    const auto* b = reinterpret_cast<const float*>(original.tensor_data(t));
    for (int64_t i = 0; i < t.num_elements(); ++i) ASSERT_NEAR(a[i], b[i], tolerance) << t.name << " " << i;
  }
}

std::vector<int> greedy(const std::string& model, const std::string& extra = "--ignore-eos") {
  Output o = pagoda("run -m " + model + " -p 'hello the' -n 12 --temp 0 --json " + extra);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  return o.exit_code == 0 ? json::parse(o.out)["token_ids"].get<std::vector<int>>() : std::vector<int>{};
}

TEST(ConvertHf, ALlamaFolderBecomesTheGgufItCameFrom) {
  Folder f = make_folder("convert-llama", "llama", "F32");
  testing::write_text(f.dir + "/generation_config.json", R"({"bos_token_id": null, "eos_token_id": [260, 257]})");
  const std::string out = testing::temp_dir() + "/converted-llama.gguf";
  Output o = pagoda("convert " + f.dir + " -o " + out);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("from LlamaForCausalLM"), std::string::npos) << o.out;
  auto converted = model::GgufFile::read(out);
  ASSERT_TRUE(converted.is_ok()) << converted.status().message();
  // The Q/K rows went back to ggml's pair order: every tensor equals the original, byte for byte.
  expect_same_tensors(f.gguf, *converted);
  EXPECT_EQ(converted->get_string("general.architecture"), "llama");
  EXPECT_EQ(converted->get_int("llama.block_count"), 2);
  for (const char* key : {"llama.block_count", "llama.context_length", "llama.embedding_length", "llama.attention.head_count"}) {
    EXPECT_EQ(converted->find(key)->type, model::GgufType::kUint32) << key << ": llama.cpp wants u32";
  }
  EXPECT_EQ(converted->get_string("tokenizer.ggml.model"), "gpt2");
  const std::vector<std::string>* tokens = converted->get_string_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 300u);  // one per embedding row: 261 + [PAD261] .. [PAD299]
  EXPECT_EQ(tokens->back(), "[PAD299]");
  EXPECT_EQ(converted->get_int("tokenizer.ggml.eos_token_id"), 260);
  EXPECT_EQ(converted->get_int("tokenizer.ggml.eot_token_id"), 257);  // generation_config's second EOS
  EXPECT_FALSE(converted->get_string("tokenizer.chat_template").value_or("").empty());
  EXPECT_EQ(converted->get_int("general.file_type"), 0);
  // And it runs as the folder does.
  EXPECT_EQ(greedy(out), greedy(f.dir));
}

// Gemma 3: Gemma's norm names back to llama.cpp's, norms back to w + 1 in f32, the sliding
// pattern as the integer llama.cpp reads, the local RoPE base; the file runs as the folder.
TEST(ConvertHf, AGemma3FolderBecomesTheGgufItCameFrom) {
  const Folder f = shape_folder("convert-gemma3", "tiny-gemma3");
  const std::string out = testing::temp_dir() + "/converted-gemma3.gguf";
  const std::optional<model::GgufFile> converted = convert_folder(f, out);
  ASSERT_TRUE(converted.has_value());
  expect_same_tensors(f.gguf, *converted, 1e-6);  // norms went through (w - 1) + 1
  EXPECT_EQ(converted->get_int("gemma3.attention.sliding_window"), 8);
  EXPECT_EQ(converted->find("gemma3.attention.sliding_window")->type, model::GgufType::kUint32);
  EXPECT_EQ(converted->get_int("gemma3.attention.sliding_window_pattern"), 3);
  EXPECT_EQ(converted->get_float("gemma3.rope.freq_base_swa"), f.gguf.get_float("gemma3.rope.freq_base_swa").value_or(10000.0));
  EXPECT_EQ(greedy(out), greedy(f.dir));
}

// Qwen3-MoE: one HF tensor per expert becomes llama.cpp's 3-D tensor per weight, byte for byte.
TEST(ConvertHf, AQwen3MoeFolderBecomesTheGgufItCameFrom) {
  const Folder f = shape_folder("convert-qwen3moe", "tiny-qwen3moe");
  const std::string out = testing::temp_dir() + "/converted-qwen3moe.gguf";
  const std::optional<model::GgufFile> converted = convert_folder(f, out);
  ASSERT_TRUE(converted.has_value());
  EXPECT_EQ(converted->tensors().size(), f.gguf.tensors().size());
  expect_same_tensors(f.gguf, *converted);
  for (const char* key : {"qwen3moe.expert_count", "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length"}) {
    ASSERT_NE(converted->find(key), nullptr) << key;
    EXPECT_EQ(converted->find(key)->type, model::GgufType::kUint32) << key;
    EXPECT_EQ(converted->get_int(key), f.gguf.get_int(key)) << key;
  }
  EXPECT_EQ(greedy(out), greedy(f.dir));
}

TEST(ConvertHf, Qwen2Bf16KeepsItsNeoxOrder) {
  Folder f = make_folder("convert-qwen2", "qwen2", "BF16");
  const std::string out = testing::temp_dir() + "/converted-qwen2.gguf";
  Output o = pagoda("convert " + f.dir + " -o " + out + " --quiet");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto converted = model::GgufFile::read(out);
  ASSERT_TRUE(converted.is_ok());
  EXPECT_EQ(converted->find_tensor("blk.0.attn_q.weight")->ggml_type, model::kGgmlTypeBF16);
  ASSERT_NE(converted->find_tensor("blk.1.attn_k.bias"), nullptr);
  EXPECT_EQ(converted->find_tensor("blk.1.attn_k.bias")->ggml_type, model::kGgmlTypeF32);  // vectors as llama.cpp writes them
  EXPECT_EQ(converted->find_tensor("output_norm.weight")->ggml_type, model::kGgmlTypeF32);
  EXPECT_EQ(converted->get_int("general.file_type"), 32);  // mostly BF16
  const std::vector<int> folder = greedy(f.dir);
  ASSERT_EQ(folder.size(), 12u);
  EXPECT_EQ(greedy(out), folder);
  Output broken = pagoda("convert " + testing::temp_dir() + " -o " + out);
  EXPECT_EQ(broken.exit_code, 1);
}

TEST(GenerationConfig, ItsEosIdsEndAGeneration) {
  Folder f = make_folder("gen-config", "llama", "F32");
  const std::vector<int> free_run = greedy(f.dir);
  ASSERT_EQ(free_run.size(), 12u);
  size_t k = 2;  // a token that first appears at k >= 2 becomes an EOS
  while (k < free_run.size() && std::find(free_run.begin(), free_run.begin() + k, free_run[k]) != free_run.begin() + k) ++k;
  ASSERT_LT(k, free_run.size());
  testing::write_text(f.dir + "/generation_config.json", "{\"eos_token_id\": [260, " + std::to_string(free_run[k]) + "]}");
  const std::vector<int> stopped = greedy(f.dir, "");
  ASSERT_EQ(stopped.size(), k + 1) << "stops at the generation_config EOS (counted)";
  EXPECT_EQ(stopped.back(), free_run[k]);
  testing::write_text(f.dir + "/generation_config.json", R"({"eos_token_id": 99999})");
  Output bad = pagoda("run -m " + f.dir + " -p hi -n 2");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("generation_config.json: eos_token_id 99999"), std::string::npos) << bad.err;
}

TEST(Progress, ABarOnATerminalAndNothingElsewhere) {
  const std::string out = testing::temp_dir() + "/progress.gguf";
  const std::string make = std::string(PAGODA_BIN_DIR) + "/pagoda make-model --shape tiny -o " + out;
  // `script` runs the command on a pseudo-terminal (util-linux, in every Debian).
  const testing::ShellRun tty = testing::run_shell("script -qec '" + make + "' /dev/null");
  ASSERT_EQ(tty.exit_code, 0) << tty.out;
  EXPECT_NE(tty.out.find("make-model tiny layers  [##############################] 100%"), std::string::npos) << tty.out;
  const testing::ShellRun quiet = testing::run_shell("script -qec '" + make + " --quiet' /dev/null");
  EXPECT_EQ(quiet.out.find("make-model tiny layers"), std::string::npos) << quiet.out;
  Output piped = pagoda("make-model --shape tiny -o " + out);
  ASSERT_EQ(piped.exit_code, 0);
  EXPECT_EQ(piped.err.find("["), std::string::npos) << piped.err;
  // Loading a GGUF shows sizes in human units.
  const testing::ShellRun load =
      testing::run_shell("script -qec '" + std::string(PAGODA_BIN_DIR) + "/pagoda run -m " + out + " -p hi -n 1' /dev/null");
  EXPECT_NE(load.out.find("loading progress.gguf  ["), std::string::npos) << load.out;
  EXPECT_NE(load.out.find(" KiB / "), std::string::npos) << load.out;
}

}  // namespace
}  // namespace pagoda
