// End-to-end tests of the `pagoda` binary: what a user types and what they read back.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvcache/kv_layout.h"
#include "model/format/gguf.h"
#include "test_data.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using testing::Output;
using testing::pagoda;
using testing::temp_dir;

std::string stories(const std::string& file) { return testing::stories_dir() + "/" + file; }

TEST(Cli, RunGreedyJsonMatchesReference) {
  Output o = pagoda("run -m " + stories("stories260K.gguf") + " -p 'Once upon a time' -n 30 --temp 0 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt_token_ids"], nlohmann::json({1, 403, 407, 261, 378}));
  std::vector<int> ids = j["token_ids"];
  ASSERT_EQ(ids.size(), 30u);
  const std::vector<int> want = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317};  // expected/*.tokens
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 10), want);
  EXPECT_EQ(j["text"].get<std::string>().rfind(", there was a little girl named Lily.", 0), 0u) << j["text"];
  EXPECT_EQ(j["stats"]["generated_tokens"], 30);
  EXPECT_GT(j["stats"]["kv_blocks_used"].get<int>(), 0);
  EXPECT_EQ(j["prefix_cache"]["lookups"], 1);
  EXPECT_EQ(j["prefix_cache"]["missed_tokens"], 5);
  EXPECT_EQ(j["prefix_cache"]["eviction"], "lru");
}

TEST(Cli, RunStreamsTextThenStats) {
  Output o = pagoda("run -m " + stories("stories260K.gguf") + " -p 'Tom and Lily' -n 16 --temp 0");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out.rfind("Tom and Lily", 0), 0u) << o.out;
  for (const char* field : {"prompt tokens", "TTFT", "prefill", "generated tokens", "decode", "KV blocks used",
                            "prefix cache     lru eviction: 1 lookups"}) {
    EXPECT_NE(o.out.find(field), std::string::npos) << field;
  }
  EXPECT_NE(o.err.find("B/token"), std::string::npos) << "start-up log states the KV sizing: " << o.err;
}

TEST(Cli, SameSeedSameSample) {
  const std::string args = "run -m " + stories("stories260K.gguf") + " -n 40 --temp 1.0 --seed 42 --json";
  Output a = pagoda(args), b = pagoda(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["token_ids"], nlohmann::json::parse(b.out)["token_ids"]);
}

TEST(Cli, TokenizePlainJsonAndSpecial) {
  Output o = pagoda("tokenize -m " + stories("stories260K.gguf") + " 'Once upon a time'");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "1 403 407 261 378\n");
  o = pagoda("tokenize -m " + stories("stories260K.gguf") + " --no-bos --json 'Tom and Lily'");
  EXPECT_EQ(o.out, "[274,287,269,317]\n");
  Output plain = pagoda("tokenize -m " + stories("stories260K.gguf") + " --no-bos '<s>'");
  Output special = pagoda("tokenize -m " + stories("stories260K.gguf") + " --no-bos --parse-special '<s>'");
  EXPECT_EQ(special.out, "1\n");
  EXPECT_NE(plain.out, "1\n");
}

TEST(Cli, TokenizeWorksOnAVocabOnlyGguf) {
  auto full = model::GgufFile::read(stories("stories260K.gguf"));
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  model::GgufFile vocab_only;
  for (const auto& [key, value] : full->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0 || key == "general.architecture") vocab_only.set(key, value);
  }
  const std::string path = temp_dir() + "/vocab-only.gguf";
  ASSERT_TRUE(vocab_only.write(path).is_ok());
  Output o = pagoda("tokenize -m " + path + " 'Once upon a time'");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "1 403 407 261 378\n");
}

TEST(Cli, ConvertLlama2cToGgufGivesTheSameGeneration) {
  const std::string out = temp_dir() + "/converted.gguf";
  Output c = pagoda("convert " + stories("stories260K.bin") + " --tokenizer " + stories("tok512.bin") + " -o " + out);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::string gen = " -p 'Once upon a time' -n 24 --temp 0 --json";
  Output a = pagoda("run -m " + out + gen);
  Output b = pagoda("run -m " + stories("stories260K.gguf") + gen);
  Output d = pagoda("run -m " + stories("stories260K.bin") + " --tokenizer " + stories("tok512.bin") + gen);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["token_ids"], nlohmann::json::parse(b.out)["token_ids"]);
  EXPECT_EQ(nlohmann::json::parse(d.out)["token_ids"], nlohmann::json::parse(b.out)["token_ids"]);
}

TEST(Cli, InfoStatesKvBytesPerToken) {
  Output o = pagoda("info " + stories("stories260K.gguf"));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("KV bytes/token  1280 (f32), 640 (f16)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("4 kv (GQA)"), std::string::npos) << o.out;
}

TEST(Cli, MakeModelWritesALoadableFile) {
  const std::string path = temp_dir() + "/tiny-q4.gguf";
  Output m = pagoda("make-model --shape tiny --dtype q4_0 -o " + path);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  Output r = pagoda("run -m " + path + " -p 'hello world' -n 8 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["token_ids"].size(), 8u);
  Output i = pagoda("info " + path);
  EXPECT_NE(i.out.find("q4_0"), std::string::npos) << i.out;
}

TEST(Cli, DefaultModelNeedsNoFile) {
  Output o = pagoda("run -n 4 --temp 0 --ignore-eos --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["token_ids"].size(), 4u);
}

// Bad input: one clear error line and exit code 1, never a crash.
void expect_clean_error(const Output& o, const std::string& fragment) {
  EXPECT_FALSE(o.signaled) << "crashed: " << o.err;
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_NE(o.err.find("error: "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(fragment), std::string::npos) << o.err;
}

TEST(Cli, CorruptTruncatedAndMissingFilesGiveClearErrors) {
  const std::string bytes = testing::read_file_or_empty(stories("stories260K.gguf"));
  ASSERT_GT(bytes.size(), 100000u);
  for (size_t cut : {size_t{3}, size_t{24}, size_t{500}, size_t{9000}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string path = temp_dir() + "/cut.gguf";
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(cut));
    expect_clean_error(pagoda("run -m " + path + " -n 2"), path);
  }
  expect_clean_error(pagoda("run -m /nonexistent/model.gguf"), "no such file");
  const std::string garbage = temp_dir() + "/garbage.bin";
  std::ofstream(garbage, std::ios::binary) << "this is not a model at all";
  expect_clean_error(pagoda("run -m " + garbage + " --tokenizer " + stories("tok512.bin")), garbage);
}

// An architecture Pagoda does not run is refused from the file's header (tools/model_source.cpp
// reads the metadata alone first), with the list of those it runs.
TEST(Cli, UnsupportedArchitectureIsRefusedFromTheHeader) {
  auto file = model::GgufFile::read(stories("stories260K.gguf"));
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  file->set("general.architecture", model::GgufValue::of_string("gpt-oss"));
  const std::string path = temp_dir() + "/moe.gguf";
  ASSERT_TRUE(file->write(path).is_ok());
  const std::string want = "unsupported architecture 'gpt-oss' (supported: llama, qwen2, qwen3, deepseek2, gemma3, qwen3moe)";
  expect_clean_error(pagoda("run -m " + path + " -n 2"), want);
  expect_clean_error(pagoda("serve -m " + path + " --port 0"), want);
}

// A file's tensor bytes: all, the routed experts' ("*_exps.*") and the embedding table's,
// counted here by name, apart from model::moe_active_bytes.
struct TensorBytes {
  int64_t total = 0, experts = 0, embedding = 0;
};
TensorBytes tensor_bytes(const std::string& path) {
  TensorBytes b;
  auto file = model::GgufFile::read(path);
  EXPECT_TRUE(file.is_ok()) << path;
  if (!file.is_ok()) return b;
  for (const auto& t : file->tensors()) {
    b.total += static_cast<int64_t>(t.bytes);
    if (t.name.find("_exps.") != std::string::npos) b.experts += static_cast<int64_t>(t.bytes);
    if (t.name == "token_embd.weight") b.embedding = static_cast<int64_t>(t.bytes);
  }
  return b;
}

// A mixture-of-experts file: info names the experts and the bytes a token reads (the router's
// F32 share, 2 of 8 experts, the rest but the untied embedding table), and it runs.
TEST(Cli, InfoOfAMixtureOfExpertsFileCountsActiveBytes) {
  const std::string path = temp_dir() + "/tiny-qwen3moe.gguf";
  Output m = pagoda("make-model --shape tiny-qwen3moe --dtype f16 -o " + path);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  Output i = pagoda("info " + path);
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("experts         8 of width 32, 2 per token"), std::string::npos) << i.out;
  const TensorBytes bytes = tensor_bytes(path);
  const int64_t total = bytes.total, experts = bytes.experts, embedding = bytes.embedding;
  const int64_t active = total - experts - embedding + experts / 8 * 2;
  EXPECT_NE(i.out.find("active bytes    " + kvcache::format_bytes(active) + " per token (2 of 8 experts"), std::string::npos)
      << i.out;
  Output r = pagoda("run -m " + path + " -p 'hello' -n 4 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["token_ids"].size(), 4u);
}

// DeepSeek-V3's experts on MLA: info states the rule, the shared experts and the leading dense
// layer, and counts the shared experts and the dense layer as read by every token; it runs.
TEST(Cli, InfoOfADeepSeekExpertsFileNamesItsRule) {
  const std::string path = temp_dir() + "/tiny-dsv3moe.gguf";
  Output m = pagoda("make-model --shape tiny-dsv3moe --dtype f32 -o " + path);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  Output i = pagoda("info " + path);
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("experts         8 of width 32, 2 per token (sigmoid, best 2 of 4 groups top-k, renormalized, x2.50)"),
            std::string::npos) << i.out;
  EXPECT_NE(i.out.find("shared experts  1 (width 32, every token)"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("dense layers    the first 1 (feed-forward 96)"), std::string::npos) << i.out;
  const TensorBytes bytes = tensor_bytes(path);
  const int64_t total = bytes.total, experts = bytes.experts, embedding = bytes.embedding;
  ASSERT_GT(experts, 0);
  const int64_t active = total - experts - embedding + experts / 8 * 2;
  EXPECT_NE(i.out.find("active bytes    " + kvcache::format_bytes(active) + " per token (2 of 8 experts"), std::string::npos)
      << i.out;
  // kvcalc: every weight resident, the active share read per token.
  Output calc = pagoda("kvcalc " + path + " --kv-dtype f16 --json");
  ASSERT_EQ(calc.exit_code, 0) << calc.err;
  const auto plan = nlohmann::json::parse(calc.out);
  EXPECT_EQ(plan["model"]["weight_bytes"], total);
  EXPECT_EQ(plan["model"]["experts"]["active_weight_bytes"], active);
  EXPECT_EQ(plan["model"]["experts"]["n_expert_used"], 2);
  Output text = pagoda("kvcalc " + path + " --kv-dtype f16");
  EXPECT_NE(text.out.find("experts   2 of 8 per token: weights " + kvcache::format_bytes(total) + " resident, " +
                          kvcache::format_bytes(active) + " read per token"), std::string::npos) << text.out;
  Output r = pagoda("run -m " + path + " -p 'hello' -n 4 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["token_ids"].size(), 4u);
}

// A llama.cpp-style Q4_K_M file: the mix of types, and the same greedy tokens on every run.
TEST(Cli, MakeModelQ4KMRunsDeterministically) {
  const std::string path = temp_dir() + "/default-q4_k_m.gguf";
  Output m = pagoda("make-model --shape default --dtype q4_k_m -o " + path);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  Output i = pagoda("info " + path);
  EXPECT_NE(i.out.find("q4_K"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("q6_K"), std::string::npos) << i.out;
  const std::string run = "run -m " + path + " -p 'hello world' -n 12 --temp 0 --ignore-eos --json";
  Output a = pagoda(run);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  Output b = pagoda(run + " --threads 1");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto ids = nlohmann::json::parse(a.out)["token_ids"];
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_EQ(ids, nlohmann::json::parse(b.out)["token_ids"]);
  const std::string bytes = testing::read_file_or_empty(path);
  const std::string cut = temp_dir() + "/cut-q4_k_m.gguf";
  std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 4096));
  expect_clean_error(pagoda("run -m " + cut + " -n 2"), "truncated");
}

TEST(Cli, OverLongRequestsAreRefused) {
  expect_clean_error(pagoda("run -m " + stories("stories260K.gguf") + " -c 64 -n 100"), "context of 64 tokens");
  expect_clean_error(pagoda("run -m " + stories("stories260K.gguf") + " --kv-cache-mem 64K -n 200"), "KV cache holds");
  expect_clean_error(pagoda("run -m " + stories("stories260K.gguf") + " --kv-cache-mem lots"), "byte size");
}

TEST(Cli, ParallelSamplesShareBlocksAndKvDumpShowsThem) {
  const std::string prompt =
      "'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'";
  Output o = pagoda("run -m " + stories("stories260K.gguf") + " -p " + prompt + " -n 12 --temp 1 --seed 5 --parallel 3 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["samples"].size(), 3u);
  EXPECT_EQ(j["samples"][1]["seed"], 6);
  EXPECT_GT(j["kv_blocks_saved"].get<int>(), 0);
  EXPECT_EQ(j["kv_blocks_independent"].get<int>() - j["kv_blocks_shared"].get<int>(), j["kv_blocks_saved"].get<int>());
  Output d = pagoda("run -m " + stories("stories260K.gguf") + " -p " + prompt + " -n 4 --temp 0 --kv-dump");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("KV cache of the sequence: length"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("ref 1  in use  hash"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("K[l0,h0,slot0] ="), std::string::npos) << d.out;
}

TEST(Cli, KvDumpNamesTheTiersHoldingEachBlock) {
  // Write-through: every committed block is in the host tier at once, and the dump says so.
  Output d = pagoda("run -m " + stories("stories260K.gguf") +
                    " -p 'Once upon a time, there was a little girl named Lily. She loved to play outside.' -n 4 "
                    "--temp 0 --kv-host-mem 1M --kv-offload write-through --kv-dump");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("tiers pool+host"), std::string::npos) << d.out;
}

TEST(Cli, BenchPrefixTtftServesThePrefixFromCache) {
  Output o = pagoda("bench -m " + stories("stories260K.gguf") + " --prefix-ttft 64 -r 1 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["cached_tokens"], 64);
  EXPECT_GT(j["ttft_uncached_ms"].get<double>(), 0.0);
}

TEST(Cli, PerplexityAndKvQualityAgainstF32) {
  const std::string text = std::string(PAGODA_SOURCE_DIR) + "/tests/data/tinystory.txt";
  Output f32 = pagoda("perplexity -m " + stories("stories260K.gguf") + " -f " + text + " -c 128 --kv-dtype f32 --json");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  auto a = nlohmann::json::parse(f32.out);
  EXPECT_GT(a["perplexity"].get<double>(), 1.0);
  EXPECT_LT(a["perplexity"].get<double>(), 20.0);  // a trained model on simple English
  EXPECT_FALSE(a.contains("mean_kl_divergence"));
  Output f16 = pagoda("perplexity -m " + stories("stories260K.gguf") + " -f " + text + " -c 128 --kv-dtype f16 --json");
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  auto b = nlohmann::json::parse(f16.out);
  EXPECT_NEAR(b["perplexity_f32_kv"].get<double>(), a["perplexity"].get<double>(), 1e-9);
  EXPECT_LT(b["mean_kl_divergence"].get<double>(), 1e-3);
  EXPECT_GT(b["top1_agreement"].get<double>(), 0.95);
  // The default model (random weights) is near-uniform over its 512 tokens: perplexity is huge.
  Output rnd = pagoda("perplexity -f " + text + " -c 128 --json");
  ASSERT_EQ(rnd.exit_code, 0) << rnd.err;
  EXPECT_GT(nlohmann::json::parse(rnd.out)["perplexity"].get<double>(), 50.0);
  expect_clean_error(pagoda("perplexity -m " + stories("stories260K.gguf") + " -f " + text + " -c 100000"),
                     "less than one chunk");
}

}  // namespace
}  // namespace pagoda
