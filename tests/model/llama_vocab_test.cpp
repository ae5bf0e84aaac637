// llama.cpp's own tokenizer test set: every models/ggml-vocab-*.gguf of the llama.cpp sources
// that node-llama-cpp@3.21.1 ships (tests/npm/llama-vocabs, unpacked by its extract_vocabs.sh)
// loads, and each one with a .inp/.out pair tokenizes every text as llama.cpp's
// test-tokenizer-0 does (add_special = false, parse_special = false). Vocabs of tokenizer models
// Pagoda does not implement (bert-bge and nomic-bert-moe: WordPiece; gemma-4) must fail with an
// error naming the model, never crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "shell.h"

namespace pagoda::model {
namespace {

std::string vocab_dir() {
  static const std::string dir = [] {
    const testing::ShellRun run =
        testing::run_shell(std::string(PAGODA_SOURCE_DIR) + "/tests/npm/llama-vocabs/extract_vocabs.sh 2>&1");
    std::string out = run.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return run.exit_code == 0 ? out : "";
  }();
  return dir;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tokenizer models Pagoda implements (tokenizer.ggml.model).
bool supported(const std::string& model) { return model == "gpt2" || model == "llama"; }

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& gguf) {
  const std::string inp = slurp(gguf + ".inp"), out = slurp(gguf + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(out);
  std::string line;
  for (const std::string& t : texts) {
    std::getline(lines, line);
    Case c{t, {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

class LlamaVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaVocab, LoadsAndTokenizesAsLlamaCpp) {
  ASSERT_FALSE(vocab_dir().empty()) << "llama.cpp's vocab set is missing: npm ci in tests/npm/llama-vocabs";
  const std::string path = vocab_dir() + "/ggml-vocab-" + GetParam() + ".gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto file = GgufFile::read(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const std::string model = file->get_string("tokenizer.ggml.model").value_or("");
  auto vocab = vocab_from_gguf(*file);
  if (!supported(model)) {
    ASSERT_FALSE(vocab.is_ok()) << model;
    EXPECT_NE(vocab.status().message().find(model), std::string::npos) << vocab.status().message();
    return;  // not implemented (WordPiece, Gemma 4's): the error says so, and that is the test
  }
  ASSERT_TRUE(vocab.is_ok()) << vocab.status().message();
  auto tok = Tokenizer::create(std::move(vocab).value());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  if (!std::filesystem::exists(path + ".inp")) return;  // a vocab without texts: loading is the test
  const std::vector<Case> cases = read_cases(path);
  ASSERT_FALSE(cases.empty());
  int mismatches = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> got = tok->encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
    if (got != c.ids && ++mismatches <= 5) {
      std::string g, w;
      for (int32_t id : got) g += " " + std::to_string(id);
      for (int32_t id : c.ids) w += " " + std::to_string(id);
      ADD_FAILURE() << GetParam() << ": '" << c.text << "'\n  got: " << g << "\n  llama.cpp:" << w;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " texts";
}

INSTANTIATE_TEST_SUITE_P(LlamaCppSet, LlamaVocab,
                         ::testing::Values("aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder",
                                           "deepseek-llm", "falcon", "gemma-4", "gpt-2", "gpt-neox", "llama-bpe",
                                           "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact",
                                           "starcoder"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

TEST(LlamaVocabSet, EveryVocabOfTheSetIsListed) {
  ASSERT_FALSE(vocab_dir().empty());
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(vocab_dir())) n += e.path().extension() == ".gguf";
  EXPECT_EQ(n, 19) << "the set changed: update the list above";
}

}  // namespace
}  // namespace pagoda::model
