// Byte-level BPE (VocabModel::kBpe) on a small hand-made vocab: merge order by rank, leftmost
// ties, ignore_merges, special tokens, decoding, GGUF round trip, and errors.
#include <gtest/gtest.h>

#include "model/text/byte_level.h"
#include "model/text/gguf_vocab.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {
namespace {

// Ids 0..255: the byte-level character of byte b has id b. Then merged tokens and specials.
enum : int32_t { kHe = 256, kLl, kHell, kHello, kSpaceW, kBc, kAb, kAa, kXyz, kEnd, kTool };

Vocab small_vocab() {
  Vocab v;
  v.model = VocabModel::kBpe;
  v.pre = "gpt-2";
  v.add_bos = false;
  v.add_space_prefix = false;
  v.bos_id = v.eos_id = v.unk_id = -1;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_level_char(static_cast<uint8_t>(b)));
  for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "bc", "ab", "aa", "xyz"}) v.tokens.emplace_back(t);
  v.tokens.emplace_back("<|end|>");
  v.tokens.emplace_back("<tool>");
  v.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "b c", "a b", "a a"};
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types[kEnd] = TokenType::kControl;
  v.types[kTool] = TokenType::kUserDefined;
  v.scores.assign(v.tokens.size(), 0.0f);
  v.eos_id = kEnd;
  return v;
}

Tokenizer make(Vocab v) {
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.is_ok()) << tok.status().message();
  return std::move(*tok);
}

using Ids = std::vector<int32_t>;

TEST(ByteLevel, MappingIsGpt2s) {
  EXPECT_EQ(byte_level_char('A'), "A");
  EXPECT_EQ(byte_level_char(' '), "\xC4\xA0");   // U+0120 Ġ
  EXPECT_EQ(byte_level_char('\n'), "\xC4\x8A");  // U+010A Ċ
  EXPECT_EQ(byte_level_char(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(byte_level_char(0xAD), "\xC5\x83");  // the 68th remapped byte: U+0143
  EXPECT_EQ(byte_level_char(0xFF), "\xC3\xBF");  // ÿ is itself
  std::string all, mapped, back;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  byte_level_encode(all, mapped);
  EXPECT_TRUE(byte_level_decode(mapped, back));
  EXPECT_EQ(back, all);
  back.clear();
  EXPECT_FALSE(byte_level_decode("\xE4\xB8\x96", back));  // 世 is not a byte-level character
  EXPECT_EQ(back, "\xE4\xB8\x96");
}

TEST(BpeTokenizer, MergesByRankLeftmostFirst) {
  const Tokenizer tok = make(small_vocab());
  EXPECT_EQ(tok.encode("hello", false, false), (Ids{kHello}));
  EXPECT_EQ(tok.encode("hello world", false, false), (Ids{kHello, kSpaceW, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(tok.encode("abc", false, false), (Ids{'a', kBc}));  // "b c" ranks before "a b"
  EXPECT_EQ(tok.encode("aaa", false, false), (Ids{kAa, 'a'}));  // ties: leftmost
  EXPECT_EQ(tok.encode("xyz", false, false), (Ids{'x', 'y', 'z'}));  // no merge makes xyz
  EXPECT_EQ(tok.encode("", false, false), Ids{});
  // Bytes of any value, even ill-formed UTF-8, are their byte-level tokens.
  EXPECT_EQ(tok.encode("\xff\n", false, false), (Ids{0xff, '\n'}));
}

TEST(BpeTokenizer, IgnoreMergesTakesWholePieces) {
  Vocab v = small_vocab();
  v.ignore_merges = true;
  const Tokenizer tok = make(std::move(v));
  EXPECT_EQ(tok.encode("xyz abc", false, false), (Ids{kXyz, ' ', 'a', kBc}));
}

TEST(BpeTokenizer, SpecialTokens) {
  const Tokenizer tok = make(small_vocab());
  // CONTROL only with parse_special; USER_DEFINED always; never split.
  EXPECT_EQ(tok.encode("he<|end|>", false, true), (Ids{kHe, kEnd}));
  const Ids plain = tok.encode("he<|end|>", false, false);
  EXPECT_EQ(plain.size(), 8u);
  EXPECT_EQ(plain.front(), kHe);
  EXPECT_EQ(tok.encode("<tool>hello", false, false), (Ids{kTool, kHello}));
  EXPECT_EQ(tok.decode(Ids{kTool, kHello, kEnd}), "<tool>hello");
  EXPECT_EQ(tok.token_to_piece(kEnd, true), "<|end|>");
}

TEST(BpeTokenizer, DecodeRoundTripsAndStreams) {
  const Tokenizer tok = make(small_vocab());
  for (const std::string s : {"hello world", "  two  spaces\n\n", "\xE4\xB8\x96\xE7\x95\x8C!", "caf\xC3\xA9"}) {
    const Ids ids = tok.encode(s, false, false);
    EXPECT_EQ(tok.decode(ids), s);
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, s);
  }
  StreamDecoder stream(tok);  // a character split over three byte tokens comes out whole
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.push(0xB8), "");
  EXPECT_EQ(stream.push(0x96), "\xE4\xB8\x96");
  EXPECT_EQ(tok.decode(Ids{0xFF, 'a'}), "\xEF\xBF\xBD" "a");  // ill-formed: U+FFFD
}

TEST(BpeTokenizer, GgufRoundTrip) {
  Vocab v = small_vocab();
  v.ignore_merges = true;
  GgufFile file;
  vocab_to_gguf(v, file);
  EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file.get_string("tokenizer.ggml.pre"), "gpt-2");
  auto read = vocab_from_gguf(file);
  ASSERT_TRUE(read.is_ok()) << read.status().message();
  EXPECT_EQ(read->model, VocabModel::kBpe);
  EXPECT_EQ(read->merges, v.merges);
  EXPECT_EQ(read->tokens, v.tokens);
  EXPECT_TRUE(read->ignore_merges);
  EXPECT_EQ(read->eos_id, kEnd);
  EXPECT_EQ(read->bos_id, -1);
  const Tokenizer tok = make(std::move(*read));
  EXPECT_EQ(tok.encode("xyz abc", false, false), (Ids{kXyz, ' ', 'a', kBc}));
}

TEST(BpeTokenizer, GgufAsLlamaCppWritesIt) {
  // No tokenizer.pagoda.* keys: the pre name decides (llama-bpe implies ignore_merges).
  GgufFile file;
  vocab_to_gguf(small_vocab(), file);
  GgufFile plain;
  for (const auto& key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                          "tokenizer.ggml.token_type"}) {
    plain.set(key, *file.find(key));
  }
  plain.set("tokenizer.ggml.pre", GgufValue::of_string("llama-bpe"));
  auto v = vocab_from_gguf(plain);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_TRUE(v->ignore_merges);
  EXPECT_FALSE(v->add_bos);
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_EQ(v->pre_regexes, *pre_tokenizer_regexes("llama-bpe"));

  plain.set("tokenizer.ggml.pre", GgufValue::of_string("unknown-pre"));
  auto unknown = vocab_from_gguf(plain);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("unknown-pre"), std::string::npos);
  GgufFile no_merges;
  no_merges.set("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  no_merges.set("tokenizer.ggml.tokens", *file.find("tokenizer.ggml.tokens"));
  auto missing = vocab_from_gguf(no_merges);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("merges"), std::string::npos);
}

TEST(BpeTokenizer, AnyBytesEncodeAndDecodeBack) {
  // Random byte strings (ill-formed UTF-8 included), through every pre-tokenizer: the ids are
  // byte-exact (decoding without sanitizing gives the input back) and decode never fails.
  uint64_t state = 12345;
  auto next = [&] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 56; };
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-v3", "deepseek-llm", "falcon"}) {
    Vocab v = small_vocab();
    v.pre = pre;
    v.normalize_nfc = std::string(pre) == "qwen2";
    const Tokenizer tok = make(std::move(v));
    for (int round = 0; round < 50; ++round) {
      std::string s;
      const size_t n = next() % 40;
      for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(next() % 4 == 0 ? 0xC0 + next() % 64 : next()));
      const Ids ids = tok.encode(s, false, true);
      std::string raw;
      for (int32_t id : ids) raw += tok.token_to_piece(id);
      if (std::string(pre) != "qwen2") {  // NFC may change valid parts
        EXPECT_EQ(raw, s) << pre;
      }
      (void)tok.decode(ids);
    }
  }
}

TEST(BpeTokenizer, BadVocabsAreErrors) {
  Vocab bad_merge = small_vocab();
  bad_merge.merges.push_back("x y");  // "xy" is not a token
  auto a = Tokenizer::create(std::move(bad_merge));
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("'x y'"), std::string::npos);
  Vocab not_tokens = small_vocab();
  not_tokens.merges.push_back("qq rr");
  EXPECT_FALSE(Tokenizer::create(std::move(not_tokens)).is_ok());
  Vocab no_byte = small_vocab();
  no_byte.tokens[7] = "seven";  // byte 0x07 has no token now, and there is no unk
  auto c = Tokenizer::create(std::move(no_byte));  // loads, as in llama.cpp (Falcon's vocab lacks <0x03>)
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(c->encode("\x07", false, false).empty());  // the byte is dropped, as llama.cpp drops it
  Vocab bad_regex = small_vocab();
  bad_regex.pre_regexes = {"[unclosed"};
  EXPECT_FALSE(Tokenizer::create(std::move(bad_regex)).is_ok());
}

}  // namespace
}  // namespace pagoda::model
