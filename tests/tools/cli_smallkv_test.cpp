// Smaller KV from the command line: `pagoda make-model` writes MLA and CLA models; `run`
// generates with them (quantized latent KV too), `info` and `kvcalc` show their KV sizes, and
// `kvcalc` shows what cross-layer sharing saves.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using testing::Output;
using testing::pagoda;

std::string make(const std::string& shape, const std::string& extra = "") {
  const std::string path = testing::temp_dir() + "/" + shape + (extra.empty() ? "" : "-cla") + ".gguf";
  Output o = pagoda("make-model --shape " + shape + " -q -o " + path + " " + extra);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  return path;
}

TEST(CliSmallKv, MlaModelRunsAndKvcalcSizesItsLatentCache) {
  const std::string m = make("tiny-mla-q");
  for (const char* dtype : {"f32", "int8", "int4"}) {
    Output o = pagoda("run -m " + m + " -p 'hello there' -n 12 --temp 0 --ignore-eos --json -t 1 --kv-dtype " + dtype);
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(nlohmann::json::parse(o.out)["token_ids"].size(), 12u) << dtype;
  }
  Output info = pagoda("info " + m);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("MLA             latent 32 + rope key 8"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("q LoRA rank 24"), std::string::npos) << info.out;
  Output calc = pagoda("kvcalc " + m + " --kv-dtype f16 --json");
  ASSERT_EQ(calc.exit_code, 0) << calc.err;
  const auto j = nlohmann::json::parse(calc.out);
  EXPECT_EQ(j["model"]["attention"], "MLA");
  EXPECT_EQ(j["rows"][0]["bytes_per_token"], 2 * 40 * 2);  // 2 layers x (32 + 8) x f16, no V
  Output window = pagoda("run -m " + m + " -p hi -n 4 --kv-window 64");
  EXPECT_NE(window.exit_code, 0);
  EXPECT_NE(window.err.find("MLA"), std::string::npos) << window.err;
}

// `--mla-prefill`: every form of the prompt's prefill (a 94-token prompt, one chunk) gives
// the same greedy tokens; an unknown form is refused naming the flag.
TEST(CliSmallKv, EveryMlaPrefillFormGeneratesTheSameGreedyTokens) {
  const std::string m = make("tiny-mla-q");
  const std::string base = "run -m " + m + " -p 'once upon a time there was a little girl who lived in a house near the " +
                           "woods with her mother' -n 12 --temp 0 --ignore-eos --json -t 2 --kv-dtype f32";
  Output plain = pagoda(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_GE(nlohmann::json::parse(plain.out)["prompt_token_ids"].size(), 16u);
  for (const char* form : {"absorbed", "expanded", "row-walk"}) {
    Output o = pagoda(base + " --mla-prefill " + form);
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(nlohmann::json::parse(o.out)["token_ids"], nlohmann::json::parse(plain.out)["token_ids"]) << form;
  }
  Output bad = pagoda(base + " --mla-prefill fused");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--mla-prefill"), std::string::npos) << bad.err;
}

TEST(CliSmallKv, ClaModelOwnsHalfTheKv) {
  const std::string plain = make("tiny");
  const std::string cla = make("tiny", "--cla 2");
  Output o = pagoda("run -m " + cla + " -p 'hello there' -n 8 --temp 0 --ignore-eos --json -t 1");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["token_ids"].size(), 8u);
  auto bytes = [](const std::string& model) {
    Output calc = pagoda("kvcalc " + model + " --kv-dtype f16 --json");
    EXPECT_EQ(calc.exit_code, 0) << calc.err;
    return nlohmann::json::parse(calc.out);
  };
  const auto a = bytes(plain), b = bytes(cla);
  EXPECT_EQ(b["rows"][0]["bytes_per_token"].get<double>() * 2, a["rows"][0]["bytes_per_token"].get<double>());
  EXPECT_EQ(b["model"]["n_kv_layers"], 1);
  Output text = pagoda("kvcalc " + cla);
  EXPECT_NE(text.out.find("cross-layer KV: 1 of 2 layers own K/V blocks (saves 50% of the KV)"), std::string::npos) << text.out;
  Output bad = pagoda("make-model --shape tiny --cla 1 -q -o " + testing::temp_dir() + "/bad.gguf");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--cla must be >= 2"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace pagoda
