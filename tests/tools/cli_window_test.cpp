// `pagoda run --kv-window W --kv-sinks S` (StreamingLLM): generation runs past the KV pool's
// token capacity at constant memory; without it the same request is refused; int4 is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_data.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using testing::Output;
using testing::pagoda;

std::string stories260k() { return testing::stories_dir() + "/stories260K.gguf"; }

TEST(CliWindow, StreamingGeneratesPastThePoolCapacity) {
  // 200K holds 20 f16 blocks of 16 tokens (320 tokens); 400 tokens are generated.
  const std::string base = "run -m " + stories260k() + " -p 'Once upon a time' -n 400 --temp 0 --kv-cache-mem 200K";
  Output refused = pagoda(base);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("more than the KV cache holds (320 tokens"), std::string::npos) << refused.err;
  Output o = pagoda(base + " --kv-window 64 --kv-sinks 4 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["token_ids"].size(), 400u);
  EXPECT_EQ(j["stats"]["generated_tokens"], 400);
  EXPECT_EQ(j["stats"]["kv_blocks_used"], 5);  // sinks 4 -> 1 block, window 64 -> 4 blocks
  // The first tokens, before any block is dropped, are those of plain generation.
  Output plain = pagoda("run -m " + stories260k() + " -p 'Once upon a time' -n 30 --temp 0 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::vector<int> want = nlohmann::json::parse(plain.out)["token_ids"];
  const std::vector<int> got = j["token_ids"];
  EXPECT_EQ(std::vector<int>(got.begin(), got.begin() + 30), want);
}

TEST(CliWindow, BadWindowOptionsAreRefused) {
  Output o = pagoda("run -m " + stories260k() + " -p hi -n 4 --kv-window 64 --kv-dtype int4");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("int4"), std::string::npos) << o.err;
  o = pagoda("run -m " + stories260k() + " -p hi -n 4 --kv-sinks 4");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("--kv-sinks needs --kv-window"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace pagoda
