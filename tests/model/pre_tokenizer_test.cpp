// Pre-tokenizer splits: hand-derived expectations for every tokenizer.ggml.pre name, and the
// splits of every name's regex list on the whole tokenizer corpus against Hugging Face's
// JavaScript Split pre-tokenizer (tests/npm/tokenizers/pretokenize.mjs, run live by node).
#include "shell.h"
#include "model/text/pre_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_data.h"

namespace pagoda::model {
namespace {

std::vector<std::string> pieces(std::string_view name, std::string_view text) {
  auto regexes = pre_tokenizer_regexes(name);
  EXPECT_TRUE(regexes.is_ok()) << regexes.status().message();
  if (!regexes.is_ok()) return {};
  auto pre = PreTokenizer::create(*regexes);
  EXPECT_TRUE(pre.is_ok()) << pre.status().message();
  if (!pre.is_ok()) return {};
  std::vector<std::string> out;
  for (const auto& [begin, end] : pre->split(text)) out.emplace_back(text.substr(begin, end - begin));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Family) {
  EXPECT_EQ(pieces("gpt-2", "Hello world  it's 123"),
            (Pieces{"Hello", " world", " ", " it", "'s", " 123"}));
  EXPECT_EQ(pieces("gpt-2", "a\n\n b!?"), (Pieces{"a", "\n\n", " b", "!?"}));
  for (const char* alias : {"mpt", "gpt-neox", "olmo"}) {
    EXPECT_EQ(*pre_tokenizer_regexes(alias), *pre_tokenizer_regexes("gpt-2")) << alias;
  }
}

TEST(PreTokenizer, Llama3AndQwen2) {
  EXPECT_EQ(pieces("llama-bpe", "  12345 I'M ok\n\n"),
            (Pieces{" ", " ", "123", "45", " I", "'M", " ok", "\n\n"}));
  EXPECT_EQ(pieces("llama-bpe", "x...\n\ny"), (Pieces{"x", "...\n\n", "y"}));
  EXPECT_EQ(pieces("qwen2", "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(*pre_tokenizer_regexes("llama3"), *pre_tokenizer_regexes("llama-bpe"));
}

TEST(PreTokenizer, Deepseek) {
  EXPECT_EQ(pieces("deepseek-v3", "abc123,def"), (Pieces{"abc", "123", ",def"}));
  EXPECT_EQ(pieces("deepseek-coder", "Hi!\n123"), (Pieces{"Hi", "!", "\n", "1", "2", "3"}));
  EXPECT_EQ(pieces("deepseek-llm", "Hello \u4e16\u754c 42  "),
            (Pieces{"Hello", " ", "\u4e16\u754c", " ", "42", "  "}));
}

TEST(PreTokenizer, FalconStarcoderDefault) {
  EXPECT_EQ(pieces("falcon", "a+b=1234"), (Pieces{"a", "+", "b", "=", "123", "4"}));
  EXPECT_EQ(pieces("starcoder", "abc 123"), (Pieces{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(*pre_tokenizer_regexes("refact"), *pre_tokenizer_regexes("starcoder"));
  EXPECT_EQ(pieces("default", "a+b 1234"), (Pieces{"a", "+", "b", " ", "123", "4"}));
}

TEST(PreTokenizer, UnicodeCategoriesAndWhitespace) {
  // \p{L} covers CJK, Arabic, combining-free Latin; \p{N} covers other scripts' digits;
  // \s is White_Space (U+0085 and U+3000 yes, U+200B no).
  EXPECT_EQ(pieces("gpt-2", "\u0645\u0631\u062d\u0628\u0627 \u0661\u0662"),
            (Pieces{"\u0645\u0631\u062d\u0628\u0627", " \u0661\u0662"}));
  EXPECT_EQ(pieces("gpt-2", "a\u0085\u0085b"), (Pieces{"a", "\u0085", "\u0085", "b"}));
  EXPECT_EQ(pieces("gpt-2", "a\u200bb"), (Pieces{"a", "\u200b", "b"}));
}

TEST(PreTokenizer, IllFormedBytesStayInPieces) {
  const std::string text = "ab\xff\xfe cd \xe4\xb8";  // stray bytes and a truncated character
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "deepseek-v3", "deepseek-llm", "default"}) {
    std::string joined;
    for (const std::string& p : pieces(name, text)) {
      EXPECT_FALSE(p.empty()) << name;
      joined += p;
    }
    EXPECT_EQ(joined, text) << name;
  }
}

TEST(PreTokenizer, Errors) {
  auto unknown = pre_tokenizer_regexes("no-such-tokenizer");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("no-such-tokenizer"), std::string::npos);
  auto bad = PreTokenizer::create({"(unclosed"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos);
  auto none = PreTokenizer::create({});
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->split("a b"), (std::vector<std::pair<size_t, size_t>>{{0, 3}}));
  EXPECT_TRUE(none->split("").empty());
}

// Every name's regex list, on the whole corpus, against the Hugging Face JS Split pre-tokenizer.
TEST(PreTokenizer, MatchesHuggingFaceOnCorpus) {
  const std::string npm = std::string(PAGODA_SOURCE_DIR) + "/tests/npm/tokenizers";
  const std::string corpus_path = std::string(PAGODA_SOURCE_DIR) + "/tests/data/tokenizer_corpus.json";
  ASSERT_TRUE(testing::file_exists(npm + "/node_modules/@huggingface/tokenizers/package.json"))
      << "run scripts/install_deps.sh (npm ci in " << npm << ")";
  const auto corpus = nlohmann::json::parse(testing::read_file_or_empty(corpus_path)).get<std::vector<std::string>>();
  const std::string regex_file = (std::filesystem::temp_directory_path() /
                                  ("pagoda_pre_" + std::to_string(getpid()) + ".json")).string();
  for (const char* name : {"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-v3", "deepseek-llm",
                           "deepseek-coder", "falcon", "starcoder"}) {
    const std::vector<std::string> regexes = *pre_tokenizer_regexes(name);
    std::ofstream(regex_file) << nlohmann::json(regexes).dump();
    const std::string cmd = "node '" + npm + "/pretokenize.mjs' '" + regex_file + "' '" + corpus_path + "' 2>&1";
    const testing::ShellRun run = testing::run_shell(cmd);
    const std::string& out = run.out;
    ASSERT_EQ(run.exit_code, 0) << cmd << "\n" << out.substr(0, 2000);
    const auto expected = nlohmann::json::parse(out).get<std::vector<std::vector<std::string>>>();
    ASSERT_EQ(expected.size(), corpus.size());
    size_t matched = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      const Pieces got = pieces(name, corpus[i]);
      if (got == expected[i]) {
        ++matched;
      } else {
        ADD_FAILURE() << name << ": string " << i << " " << nlohmann::json(corpus[i]).dump()
                      << "\n  pagoda:    " << nlohmann::json(got).dump()
                      << "\n  reference: " << nlohmann::json(expected[i]).dump();
      }
    }
    std::printf("pre-tokenizer %s: %zu/%zu strings split as the reference\n", name, matched, corpus.size());
  }
  std::filesystem::remove(regex_file);
}

}  // namespace
}  // namespace pagoda::model
