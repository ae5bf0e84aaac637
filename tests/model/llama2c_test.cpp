#include "model/format/llama2c.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "test_data.h"

namespace pagoda::model {
namespace {

std::string stories(const std::string& leaf) { return pagoda::testing::stories_dir() + "/" + leaf; }

std::string temp_path(const std::string& leaf) {
  return ::testing::TempDir() + "pagoda_llama2c_" + std::to_string(::getpid()) + "_" + leaf;
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(out.good()) << path;
}

// A tiny checkpoint whose i-th float (after the header) has the value i, so every tensor's
// origin in the file can be checked.
struct Synthetic {
  int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 6, seq_len = 4;
  bool shared = true;
  bool freq_cis = true;
  int32_t head() const { return dim / heads; }
  int32_t kv_dim() const { return kv_heads * head(); }

  // Start (in floats) of each array, walking the file like run.c's memory_map_weights.
  struct Offsets { int64_t emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls, end; };
  Offsets offsets() const {
    Offsets o;
    int64_t p = 0;
    o.emb = p; p += int64_t{vocab} * dim;
    o.rms_att = p; p += int64_t{layers} * dim;
    o.wq = p; p += int64_t{layers} * dim * dim;
    o.wk = p; p += int64_t{layers} * dim * kv_dim();
    o.wv = p; p += int64_t{layers} * dim * kv_dim();
    o.wo = p; p += int64_t{layers} * dim * dim;
    o.rms_ffn = p; p += int64_t{layers} * dim;
    o.w1 = p; p += int64_t{layers} * dim * hidden;
    o.w2 = p; p += int64_t{layers} * hidden * dim;
    o.w3 = p; p += int64_t{layers} * dim * hidden;
    o.rms_final = p; p += dim;
    if (freq_cis) p += int64_t{seq_len} * head();  // real and imag halves
    o.wcls = shared ? o.emb : p;
    if (!shared) p += int64_t{vocab} * dim;
    o.end = p;
    return o;
  }
  std::vector<uint8_t> bytes() const {
    int32_t header[7] = {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq_len};
    std::vector<uint8_t> out(sizeof(header) + 4 * offsets().end);
    std::memcpy(out.data(), header, sizeof(header));
    for (int64_t i = 0; i < offsets().end; ++i) {
      float v = static_cast<float>(i);
      std::memcpy(out.data() + sizeof(header) + 4 * i, &v, 4);
    }
    return out;
  }
};

struct Token { float score; std::string text; };

std::vector<uint8_t> tokenizer_bytes(const std::vector<Token>& tokens, uint32_t max_len) {
  std::vector<uint8_t> out(4);
  std::memcpy(out.data(), &max_len, 4);
  for (const Token& t : tokens) {
    uint32_t len = static_cast<uint32_t>(t.text.size());
    size_t at = out.size();
    out.resize(at + 8 + len);
    std::memcpy(out.data() + at, &t.score, 4);
    std::memcpy(out.data() + at + 4, &len, 4);
    std::memcpy(out.data() + at + 8, t.text.data(), len);
  }
  return out;
}

const std::vector<Token> kTokens = {
    {0, "x"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}, {0, "<0x0A>"}, {-1.5f, " a b"}, {-2, ""}};

// Writes a synthetic checkpoint and tokenizer and imports them.
Result<GgufFile> import_synthetic(const Synthetic& s, const std::vector<uint8_t>& tokenizer) {
  const std::string model = temp_path("model.bin"), tok = temp_path("tok.bin");
  std::vector<uint8_t> bytes = s.bytes();
  write_file(model, bytes.data(), bytes.size());
  write_file(tok, tokenizer.data(), tokenizer.size());
  auto f = import_llama2c(model, tok);
  std::remove(model.c_str());
  std::remove(tok.c_str());
  return f;
}

void expect_floats_from(const GgufFile& f, const std::string& name, int64_t start) {
  const GgufTensorInfo* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  ASSERT_EQ(t->ggml_type, kGgmlTypeF32);
  const auto* data = reinterpret_cast<const float*>(f.tensor_data(*t));
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    ASSERT_EQ(data[i], static_cast<float>(start + i)) << name << " element " << i;
  }
}

TEST(Llama2cImport, Stories260KMatchesReferenceGguf) {
  auto imported = import_llama2c(stories("stories260K.bin"), stories("tok512.bin"));
  ASSERT_TRUE(imported.is_ok()) << imported.status().message();
  auto reference = GgufFile::read(stories("stories260K.gguf"));
  ASSERT_TRUE(reference.is_ok()) << reference.status().message();
  // Same tensors, same order, bit-identical data.
  ASSERT_EQ(imported->tensors().size(), 48u);
  ASSERT_EQ(imported->tensors().size(), reference->tensors().size());
  for (size_t i = 0; i < reference->tensors().size(); ++i) {
    const GgufTensorInfo& want = reference->tensors()[i];
    const GgufTensorInfo& got = imported->tensors()[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.dims, want.dims) << want.name;
    EXPECT_EQ(got.ggml_type, want.ggml_type) << want.name;
    ASSERT_EQ(got.bytes, want.bytes) << want.name;
    EXPECT_EQ(std::memcmp(imported->tensor_data(got), reference->tensor_data(want), want.bytes), 0) << want.name;
  }
  // Same metadata, except the documented differences.
  for (const auto& [key, value] : reference->metadata()) {
    if (key == "general.name" || key == "llama.context_length" || key == "tokenizer.ggml.seperator_token_id" ||
        key == "tokenizer.ggml.padding_token_id") {
      continue;
    }
    const GgufValue* got = imported->find(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_TRUE(*got == value) << key << ": " << got->to_display_string() << " vs " << value.to_display_string();
  }
  EXPECT_EQ(imported->get_int("llama.context_length"), 512);  // the trained seq_len
  EXPECT_EQ(imported->get_string("general.name"), "stories260K");
  // Minus the converter's separator/padding ids, plus explicit add_bos/add_eos/add_space_prefix.
  EXPECT_EQ(imported->metadata().size(), reference->metadata().size() - 2 + 3);
  EXPECT_EQ(imported->get_bool("tokenizer.ggml.add_bos_token"), true);

  auto header = read_llama2c_header(stories("stories260K.bin"));
  ASSERT_TRUE(header.is_ok()) << header.status().message();
  EXPECT_EQ(header->dim, 64);
  EXPECT_EQ(header->hidden_dim, 172);
  EXPECT_EQ(header->n_kv_heads, 4);
  EXPECT_EQ(header->kv_dim(), 32);
  EXPECT_TRUE(header->shared_classifier);

  // The imported file survives a write/parse round trip.
  std::vector<uint8_t> bytes = imported->to_bytes();
  auto reparsed = GgufFile::parse(bytes.data(), bytes.size(), "imported.gguf");
  ASSERT_TRUE(reparsed.is_ok()) << reparsed.status().message();
  EXPECT_EQ(reparsed->to_bytes(), bytes);
}

TEST(Llama2cImport, Stories260KWithoutFreqCisTail) {
  std::string bin = pagoda::testing::read_file_or_empty(stories("stories260K.bin"));
  const size_t freq_bytes = 2 * 512 * 4 * 4;  // seq_len x head_dim/2 floats, twice
  ASSERT_EQ(bin.size(), 1056540u);
  const std::string path = temp_path("nofreq.bin");
  write_file(path, bin.data(), bin.size() - freq_bytes);
  auto cut = import_llama2c(path, stories("tok512.bin"));
  auto full = import_llama2c(stories("stories260K.bin"), stories("tok512.bin"));
  std::remove(path.c_str());
  ASSERT_TRUE(cut.is_ok()) << cut.status().message();
  ASSERT_TRUE(full.is_ok());
  cut->set("general.name", GgufValue::of_string("stories260K"));  // the file stems differ
  EXPECT_EQ(cut->to_bytes(), full->to_bytes());
}

TEST(Llama2cImport, SyntheticLayoutSharedAndUnshared) {
  for (bool shared : {true, false}) {
    for (bool freq : {true, false}) {
      SCOPED_TRACE(std::string(shared ? "shared" : "unshared") + (freq ? ", freq_cis" : ", no freq_cis"));
      Synthetic s;
      s.shared = shared;
      s.freq_cis = freq;
      auto f = import_synthetic(s, tokenizer_bytes(kTokens, 6));
      ASSERT_TRUE(f.is_ok()) << f.status().message();
      const Synthetic::Offsets o = s.offsets();
      expect_floats_from(*f, "token_embd.weight", o.emb);
      expect_floats_from(*f, "output_norm.weight", o.rms_final);
      expect_floats_from(*f, "output.weight", o.wcls);
      for (int l = 0; l < s.layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        expect_floats_from(*f, p + "attn_norm.weight", o.rms_att + l * s.dim);
        expect_floats_from(*f, p + "attn_q.weight", o.wq + l * s.dim * s.dim);
        expect_floats_from(*f, p + "attn_k.weight", o.wk + l * s.dim * s.kv_dim());
        expect_floats_from(*f, p + "attn_v.weight", o.wv + l * s.dim * s.kv_dim());
        expect_floats_from(*f, p + "attn_output.weight", o.wo + l * s.dim * s.dim);
        expect_floats_from(*f, p + "ffn_norm.weight", o.rms_ffn + l * s.dim);
        expect_floats_from(*f, p + "ffn_gate.weight", o.w1 + l * s.dim * s.hidden);
        expect_floats_from(*f, p + "ffn_down.weight", o.w2 + l * s.hidden * s.dim);
        expect_floats_from(*f, p + "ffn_up.weight", o.w3 + l * s.dim * s.hidden);
      }
      EXPECT_EQ(f->find_tensor("blk.1.attn_k.weight")->dims, (std::vector<int64_t>{8, 4}));
      EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight")->dims, (std::vector<int64_t>{12, 8}));
      EXPECT_EQ(f->find_tensor("blk.0.ffn_up.weight")->dims, (std::vector<int64_t>{8, 12}));
      EXPECT_EQ(f->find_tensor("output.weight")->dims, (std::vector<int64_t>{8, 6}));
      EXPECT_EQ(f->get_int("llama.rope.dimension_count"), 4);
      EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 1);
    }
  }
}

TEST(Llama2cImport, VocabLikeTheConverter) {
  auto f = import_synthetic(Synthetic(), tokenizer_bytes(kTokens, 6));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const std::vector<std::string> want = {"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81" "a\xe2\x96\x81" "b", ""};
  EXPECT_EQ(*f->get_string_array("tokenizer.ggml.tokens"), want);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{2, 3, 3, 6, 1, 3}));
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores"), (std::vector<float>{0, 0, 0, 0, -1.5f, -2}));
  EXPECT_EQ(f->find("tokenizer.ggml.token_type")->element_type, GgufType::kInt32);
  EXPECT_EQ(f->find("tokenizer.ggml.bos_token_id")->type, GgufType::kUint32);
}

void expect_import_error(const Synthetic& s, const std::vector<uint8_t>& tokenizer, const std::string& want) {
  auto f = import_synthetic(s, tokenizer);
  ASSERT_FALSE(f.is_ok()) << "expected: " << want;
  EXPECT_NE(f.status().message().find(want), std::string::npos) << f.status().message();
}

TEST(Llama2cCorrupt, BadHeaders) {
  const std::vector<uint8_t> tok = tokenizer_bytes(kTokens, 6);
  Synthetic s;
  s.heads = 3;  // 8 % 3
  expect_import_error(s, tok, "dim 8 is not a multiple of n_heads 3");
  s = Synthetic();
  s.heads = 4;
  s.kv_heads = 3;
  expect_import_error(s, tok, "n_heads 4 is not a multiple of n_kv_heads 3");
  s = Synthetic();
  s.layers = 0;
  expect_import_error(s, tok, "header field n_layers = 0");
  s = Synthetic();
  s.hidden = -5;
  expect_import_error(s, tok, "header field hidden_dim = -5");
  s = Synthetic();
  s.heads = 8;  // head_dim 1
  s.kv_heads = 8;
  expect_import_error(s, tok, "head_dim 1 is odd");
  const std::string path = temp_path("ak42.bin");
  int32_t header[7] = {0x616b3432, 1, 0, 0, 0, 0, 0};  // the "ak42" magic of newer exports
  write_file(path, header, sizeof(header));
  auto h = read_llama2c_header(path);
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("version 1/2"), std::string::npos) << h.status().message();
  write_file(path, header, 10);
  h = read_llama2c_header(path);
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("too small"), std::string::npos) << h.status().message();
  std::remove(path.c_str());
  auto missing = import_llama2c("/nonexistent/x.bin", "/nonexistent/t.bin");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/x.bin: cannot open"), std::string::npos);
}

TEST(Llama2cCorrupt, FileSizeMustMatchTheHeader) {
  Synthetic s;
  std::vector<uint8_t> bytes = s.bytes();
  const std::string model = temp_path("size.bin");
  const std::string tok = temp_path("size_tok.bin");
  std::vector<uint8_t> tok_bytes = tokenizer_bytes(kTokens, 6);
  write_file(tok, tok_bytes.data(), tok_bytes.size());
  for (long delta : {-1L, 1L, -4L, 4L, -static_cast<long>(bytes.size()) + 28}) {
    write_file(model, bytes.data(), bytes.size() + std::min(delta, 0L));
    if (delta > 0) {
      std::ofstream(model, std::ios::binary | std::ios::app).write("\0\0\0\0", delta);
    }
    auto f = import_llama2c(model, tok);
    ASSERT_FALSE(f.is_ok()) << "delta " << delta;
    EXPECT_NE(f.status().message().find("truncated or not a llama2.c checkpoint"), std::string::npos)
        << f.status().message();
    EXPECT_EQ(f.status().message().rfind(model + ": ", 0), 0u) << f.status().message();
  }
  std::remove(model.c_str());
  std::remove(tok.c_str());
}

TEST(Llama2cCorrupt, TokenizerTruncatedAnywhereOrTooLong) {
  const std::vector<uint8_t> tok = tokenizer_bytes(kTokens, 6);
  for (size_t cut = 0; cut < tok.size(); ++cut) {
    auto f = import_synthetic(Synthetic(), std::vector<uint8_t>(tok.begin(), tok.begin() + cut));
    ASSERT_FALSE(f.is_ok()) << "cut " << cut;
    EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status().message();
  }
  std::vector<uint8_t> longer = tok;
  longer.push_back(0);
  expect_import_error(Synthetic(), longer, "the model's vocab_size does not match this tokenizer");
  expect_import_error(Synthetic(), tokenizer_bytes(kTokens, 5), "token 2 of 6 has length 6");
  std::vector<uint8_t> huge = tok;
  const uint32_t big = 0xfffffff0u;
  std::memcpy(huge.data() + 4 + 4, &big, 4);  // length of token 0
  expect_import_error(Synthetic(), huge, "token 0 of 6 has length 4294967280");
  std::vector<uint8_t> huge_max = huge;
  std::memcpy(huge_max.data(), &big, 4);  // max_token_length too: caught as truncation
  expect_import_error(Synthetic(), huge_max, "truncated");
}

}  // namespace
}  // namespace pagoda::model
