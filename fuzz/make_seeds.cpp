// Writes the seed corpora of the harnesses (fuzz/corpus/<harness>/seed-*): small valid inputs
// built with the project's own writers, so every seed reaches the deep paths of its parser.
//   make_seeds OUT_DIR [PAGODA_TEST_DATA]     (scripts/fuzz.sh --make-seeds)
// Crash reproducers (crash-*, regression inputs) live beside the seeds and are not rewritten.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "kvcache/block_record.h"
#include "model/text/byte_level.h"
#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "model/format/llama2c.h"
#include "model/model_factory.h"

using namespace pagoda;
using namespace std::string_literals;
using model::GgufFile;
using model::GgufValue;
namespace fs = std::filesystem;

namespace {

fs::path out_root;

void seed(const std::string& harness, const std::string& name, std::string_view bytes) {
  const fs::path dir = out_root / harness;
  fs::create_directories(dir);
  fuzz::write_file((dir / ("seed-" + name)).string(), bytes);
}
std::string as_text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  size_t i = 0;
  for (std::string_view p : parts) {
    if (i++ > 0) out += fuzz::kPartSeparator;
    out += p;
  }
  return out;
}

void gguf_seeds() {
  GgufFile meta;
  meta.set("general.architecture", GgufValue::of_string("llama"));
  meta.set("u8", GgufValue::of_u8(7));
  meta.set("i16", GgufValue::of_i16(-3));
  meta.set("u64", GgufValue::of_u64(1ull << 40));
  meta.set("f64", GgufValue::of_f64(0.25));
  meta.set("flag", GgufValue::of_bool(true));
  meta.set("names", GgufValue::string_array({"a", "bc", ""}));
  meta.set("floats", GgufValue::f32_array({1.5f, -2.0f}));
  meta.set("nested", GgufValue::array_of_arrays({GgufValue::i32_array({1, 2}), GgufValue::string_array({"x"})}));
  const float small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  (void)meta.add_tensor("t.f32", {4, 2}, model::kGgmlTypeF32, small, sizeof(small));
  seed("gguf", "metadata", as_text(meta.to_bytes()));

  // A whole micro llama (8-wide, 1 layer, 260-token synthetic vocab): hyperparameters, vocab,
  // every tensor, in f16 to stay small; and a qwen2 one with biases and a sliding window.
  for (const char* arch : {"llama", "qwen2"}) {
    model::ModelShape shape{"micro", 8, 1, 2, 1, 16, 260, 32, arch, arch[0] == 'q' ? 16 : 0};
    auto micro = model::make_random_model(shape, DType::kF16, 1);
    if (!micro.is_ok()) fuzz::fuzz_fail("make_seeds: micro model", micro.status().message());
    seed("gguf", std::string("micro-") + arch, as_text(micro->to_bytes()));
  }
  GgufFile vocab_only;
  vocab_only.set("general.architecture", GgufValue::of_string("llama"));
  model::vocab_to_gguf(model::make_synthetic_vocab(260), vocab_only);
  seed("gguf", "vocab", as_text(vocab_only.to_bytes()));
}

void llama2c_seeds() {
  // dim 8, hidden 12, 2 layers, 2 heads, 1 kv head, vocab 6, seq_len 4; weights i-th float = i.
  const int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 6, seq_len = 4;
  const int64_t kv_dim = kv_heads * (dim / heads);
  const int64_t floats = int64_t{vocab} * dim + layers * (2 * dim + 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * hidden) +
                         dim + int64_t{seq_len} * (dim / heads);
  for (bool shared : {true, false}) {
    const int32_t header[7] = {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq_len};
    std::string model(reinterpret_cast<const char*>(header), sizeof(header));
    const int64_t n = floats + (shared ? 0 : int64_t{vocab} * dim);
    for (int64_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(i % 97) / 97.0f;
      model.append(reinterpret_cast<const char*>(&f), 4);
    }
    std::string tok;
    const uint32_t max_len = 8;
    tok.append(reinterpret_cast<const char*>(&max_len), 4);
    for (const char* t : {"<unk>", "\n<s>\n", "\n</s>\n", "<0x41>", " a", "ab"}) {
      const float score = -1.0f;
      const int32_t len = static_cast<int32_t>(std::strlen(t));
      tok.append(reinterpret_cast<const char*>(&score), 4);
      tok.append(reinterpret_cast<const char*>(&len), 4);
      tok += t;
    }
    seed("llama2c", shared ? "shared" : "own-classifier", join({model, tok}));
  }
}

void safetensors_seeds() {
  auto file = [](const nlohmann::json& header, size_t data_bytes) {
    std::string h = header.dump();
    const uint64_t n = h.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    out += h;
    out.append(data_bytes, '\x01');
    return out;
  };
  seed("safetensors", "two", file({{"a", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
                                   {"b", {{"dtype", "BF16"}, {"shape", nlohmann::json::array({3})}, {"data_offsets", {16, 22}}}},
                                   {"__metadata__", {{"format", "pt"}}}}, 22));
  seed("safetensors", "empty-and-scalar", file({{"e", {{"dtype", "I8"}, {"shape", nlohmann::json::array({0})}, {"data_offsets", {0, 0}}}},
                                                {"s", {{"dtype", "F16"}, {"shape", nlohmann::json::array()}, {"data_offsets", {0, 2}}}}}, 2));
}

void text_seeds() {
  const nlohmann::json llama = {{"architectures", nlohmann::json::array({"LlamaForCausalLM"})}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                                {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 128},
                                {"vocab_size", 300}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
                                {"rope_theta", 500000.0}, {"hidden_act", "silu"}, {"tie_word_embeddings", false},
                                {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                                  {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 128}}}};
  seed("hf_config", "llama3", llama.dump(1));
  nlohmann::json qwen = llama;
  qwen["architectures"] = nlohmann::json::array({"Qwen3ForCausalLM"});
  qwen["head_dim"] = 32;
  qwen["rope_scaling"] = nullptr;
  qwen["tie_word_embeddings"] = true;
  seed("hf_config", "qwen3", qwen.dump(1));
  nlohmann::json mistral = llama;
  mistral["architectures"] = nlohmann::json::array({"MistralForCausalLM"});
  mistral["sliding_window"] = 64;
  mistral["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  seed("hf_config", "mistral", mistral.dump());
  nlohmann::json qwen2 = llama;
  qwen2["architectures"] = nlohmann::json::array({"Qwen2ForCausalLM"});
  qwen2.erase("rope_scaling");
  qwen2["partial_rotary_factor"] = 0.5;
  seed("hf_config", "qwen2", qwen2.dump());

  // tokenizer.json folders: byte-level BPE (all 256 byte characters, merges, added tokens) with
  // a tokenizer_config.json and a generation_config.json; SentencePiece-style BPE.
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(model::byte_level_char(static_cast<uint8_t>(b)))] = b;
  vocab["ab"] = 256;
  vocab["Ġa"] = 257;
  const nlohmann::json byte_level = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "Ġ a"}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\d{1,3}"}}}, {"behavior", "Isolated"}},
                                                                   {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"added_tokens", {{{"id", 258}, {"content", "<|eot|>"}, {"special", true}}, {{"id", 259}, {"content", "<x>"}, {"special", false}}}}};
  const nlohmann::json config = {{"bos_token", nullptr}, {"eos_token", {{"content", "<|eot|>"}}}, {"add_bos_token", false},
                                 {"chat_template", "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}};
  seed("hf_tokenizer", "byte-level", join({byte_level.dump(), config.dump(), R"({"eos_token_id": [258, 259]})"}));
  seed("hf_tokenizer", "byte-level-alone", byte_level.dump());
  nlohmann::json spm_vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"▁", 3}, {"a", 4}, {"b", 5}, {"▁a", 6}, {"ab", 7}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spm_vocab[name] = 8 + b;
  }
  const nlohmann::json spm = {
      {"model", {{"type", "BPE"}, {"vocab", spm_vocab}, {"merges", {"▁ a", "a b"}}, {"byte_fallback", true}, {"unk_token", "<unk>"}}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "▁"}}, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}}, {{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}}}};
  seed("hf_tokenizer", "sentencepiece", join({spm.dump(), R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})"}));

  // Tokenizer inputs: byte 0 picks the vocab (0 tok512, 1 Llama 2, 2 Llama 3, 3 Qwen3).
  const std::string texts[] = {"Once upon a time, there was a little girl named Lily.",
                               " leading space and  two\ttabs\nnewline 12345 678",
                               "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80 e\xCC\x81",
                               "<s>special</s><|eot_id|><|im_end|> [INST]", "\xFF\xFE invalid \xC3"};
  for (int v = 0; v < 4; ++v) {
    for (size_t i = 0; i < std::size(texts); ++i) {
      seed("tokenizer", std::to_string(v) + "-" + std::to_string(i), std::string(1, static_cast<char>(v)) + texts[i]);
    }
  }
  // Chat conversations: family, flags, then role byte + content per message (0x1E between).
  for (int family = 0; family < 7; ++family) {
    const std::string conv = std::string(1, static_cast<char>(family)) + "\x01"s + "\x00You are terse."s + "\x1e"s +
                             "\x01Hi there "s + "\x1e"s + "\x02 Hello! "s + "\x1e"s + "\x01What is 2+2?"s;
    seed("chat_template", "family-" + std::to_string(family), conv);
  }
  seed("chat_template", "deepseek-calls",
       "\x06\x19"s + "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜>"s + "\x1e"s +
           "<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"s);
  seed("chat_template", "jinja-llama3", "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>' %}<|eot_id|>");

  // OpenAI bodies (both parsers run on every input).
  seed("openai_request", "completion", R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stop": ["\n", "."], "logprobs": 2, "n": 2, "seed": 7})");
  seed("openai_request", "completion-tokens", R"({"prompt": [[1, 2, 3], "text", [4]], "stream": true, "stream_options": {"include_usage": true}, "stop_token_ids": [2], "ignore_eos": true, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1, "priority": -1, "cache_salt": "tenant"})");
  seed("openai_request", "chat", R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]}, {"role": "assistant", "content": null}, {"role": "developer", "content": "x"}], "max_completion_tokens": 5, "top_p": 0.9, "logprobs": true, "top_logprobs": 3, "response_format": {"type": "text"}})");
  seed("openai_request", "chat-stream", R"({"messages": [{"role": "user", "content": "\u00e9\ud83d\ude00"}], "stream": true, "n": 3, "stop": "END", "presence_penalty": 0, "best_of": 3, "chat_template": "chatml"})");
  seed("openai_request", "constraints", R"({"prompt": "x", "structured_outputs": {"regex": "[a-z]{1,3}"}, "guided_choice": null, "grammar": null})");
  // grammar: the first byte picks the parser (fuzz/grammar_fuzz.cpp).
  seed("grammar", "gbnf", "groot ::= answer \", \" [0-9]{1,3} ws\nanswer ::= \"yes\" | \"no\" | ( [^\\x00-\\x1F\"]+ )?\nws ::= [ \\t\\n]*\n");
  seed("grammar", "regex", "r^(?:[A-Z]{2,3}|\\d+)-(?<n>[a-z]*?)\\.\\u00e9[^\\s\\]]{0,4}$");
  seed("grammar", "pattern", "p^[a-z]+(\\.[a-z]+)*@x\\.com$");
}

void block_record_seeds() {
  using namespace kvcache;
  for (kernels::KvDType dtype : {kernels::KvDType::kF32, kernels::KvDType::kF16, kernels::KvDType::kInt8, kernels::KvDType::kInt4}) {
    KvLayout l;
    l.n_layer = 1;
    l.n_kv_head = 1;
    l.head_dim = 4;
    l.block_size = 4;
    l.dtype = dtype;
    BlockRecordMeta meta = record_meta_for(l);
    meta.ns = {11, 22, 33};
    meta.block_hash = 0x1234;
    meta.parent_hash = kRootBlockHash;
    const std::vector<int32_t> tokens = {1, 2, 3, 4};
    std::vector<uint8_t> payload(static_cast<size_t>(meta.payload_bytes), 0x5a);
    const ConstByteSpan segs[] = {{payload.data(), payload.size()}};
    std::vector<uint64_t> storage(static_cast<size_t>(record_bytes(meta) + 7) / 8);
    const ByteSpan out{reinterpret_cast<uint8_t*>(storage.data()), static_cast<size_t>(record_bytes(meta))};
    encode_block_record(meta, tokens, segs, out);
    seed("block_record", std::string(kernels::kv_dtype_name(dtype)), std::string(reinterpret_cast<const char*>(out.data()), out.size()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_root = argv[1];
  gguf_seeds();
  llama2c_seeds();
  safetensors_seeds();
  text_seeds();
  block_record_seeds();
  return 0;
}
