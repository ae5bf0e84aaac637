// The `pagoda` binary on Hugging Face folders: info describes them, broken folders give an
// error (never a crash).
#include <gtest/gtest.h>

#include <filesystem>

#include "hf_writer.h"
#include "model/model_factory.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using testing::Output;
using testing::pagoda;

std::string hf_folder(const std::string& name, const testing::HfWriteOptions& options, const std::string& arch = "llama") {
  const std::string dir = testing::temp_dir() + "/" + name;
  std::filesystem::remove_all(dir);
  model::ModelShape shape{"t", 64, 2, 4, 2, 96, 300, 128, arch};
  auto gguf = model::make_random_model(shape, DType::kF32, 3);
  EXPECT_TRUE(gguf.is_ok());
  testing::write_hf_folder(*gguf, dir, options);
  return dir;
}

TEST(CliHf, InfoDescribesAFolder) {
  nlohmann::json scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 256}};
  const std::string dir = hf_folder("info", {.dtype = "BF16", .shards = 2, .extra_config = {{"rope_scaling", scaling}}});
  Output o = pagoda("info " + dir);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  for (const char* want : {"(Hugging Face LlamaForCausalLM)", "architecture    llama", "heads           4 query, 2 kv (GQA), head dim 16",
                           "neox halves", "rope scaling    per-pair frequency divisors 1 .. 8", "safetensors     2 files",
                           "BF16"}) {
    EXPECT_NE(o.out.find(want), std::string::npos) << want << "\n" << o.out;
  }
  Output q2 = pagoda("info " + hf_folder("info-qwen2", {}, "qwen2"));
  ASSERT_EQ(q2.exit_code, 0) << q2.err;
  EXPECT_NE(q2.out.find("attention       q/k/v bias"), std::string::npos) << q2.out;
}

TEST(CliHf, BrokenFoldersAreErrors) {
  const std::string dir = hf_folder("broken", {});
  testing::write_text(dir + "/model.safetensors", std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}      ", 24));
  for (const std::string& cmd : {"info " + dir, "run -m " + dir + " -p hi -n 2", "bench -m " + dir}) {
    SCOPED_TRACE(cmd);
    Output o = pagoda(cmd);
    EXPECT_FALSE(o.signaled);
    EXPECT_EQ(o.exit_code, 1);
    EXPECT_NE(o.err.find("error: "), std::string::npos) << o.err;
  }
  EXPECT_NE(pagoda("info " + dir).err.find("bad safetensors header: tensor 'a' is not an object"), std::string::npos);

  const std::string empty = testing::temp_dir() + "/empty-folder";
  std::filesystem::create_directories(empty);
  Output o = pagoda("run -m " + empty + " -p hi");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("is a directory without config.json"), std::string::npos) << o.err;

  o = pagoda("convert " + hf_folder("convert", {}) + " -o " + testing::temp_dir() + "/x.gguf");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("is a Hugging Face folder; this command reads only GGUF and llama2.c files"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace pagoda
