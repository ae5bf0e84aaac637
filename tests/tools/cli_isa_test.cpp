// `--isa` (EngineConfig::isa): every ISA this CPU runs generates the same greedy tokens on the
// real stories260K model; an ISA the CPU lacks is refused with the reason; `--batched-bf16` on
// kernels without the bf16 GEMM is ignored with a warning.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/matmul.h"
#include "test_data.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using testing::Output;
using testing::pagoda;

std::string run_base() {
  return "run -m " + testing::stories_dir() + "/stories260K.gguf -p 'Once upon a time' -n 24 --temp 0 --json -t 2";
}

TEST(CliIsa, EveryIsaHereGeneratesTheSameGreedyTokens) {
  std::vector<int> first;
  for (kernels::Isa isa : kernels::supported_isas()) {
    SCOPED_TRACE(kernels::isa_name(isa));
    Output o = pagoda(run_base() + " --isa " + kernels::isa_name(isa));
    ASSERT_EQ(o.exit_code, 0) << o.err;
    const std::vector<int> ids = nlohmann::json::parse(o.out)["token_ids"];
    ASSERT_EQ(ids.size(), 24u);
    if (first.empty()) first = ids;
    EXPECT_EQ(ids, first);
  }
}

TEST(CliIsa, AnIsaTheCpuLacksIsRefused) {
  const kernels::Isa best = kernels::detect_isa();
  if (best == kernels::Isa::kAmx) GTEST_SKIP() << "this CPU runs every ISA";
  const kernels::Isa above = static_cast<kernels::Isa>(static_cast<int>(best) + 1);
  Output o = pagoda(run_base() + " --isa " + kernels::isa_name(above));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find(std::string("this CPU runs at most ") + kernels::isa_name(best)), std::string::npos) << o.err;
  o = pagoda(run_base() + " --isa avx1024");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("--isa"), std::string::npos) << o.err;
}

TEST(CliIsa, BatchedBf16OnKernelsWithoutTheBf16GemmIsIgnoredWithAWarning) {
  Output o = pagoda(run_base() + " --isa scalar --batched-bf16");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("--batched-bf16 ignored"), std::string::npos) << o.err;
  Output plain = pagoda(run_base() + " --isa scalar");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["token_ids"], nlohmann::json::parse(plain.out)["token_ids"]);
}

// `--matmul-precision f32`: the start-up log says so, the greedy tokens of an f32-weight model
// do not change (its weights never took a bf16 path), and --batched-bf16 beside it is refused.
TEST(CliIsa, MatmulPrecisionIsStatedAndChosen) {
  Output exact = pagoda(run_base() + " --matmul-precision f32 -v");
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_NE(exact.err.find("matmul precision: f16/bf16 weights f32 (--matmul-precision f32)"), std::string::npos)
      << exact.err;
  Output plain = pagoda(run_base() + " -v");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.err.find("matmul precision: f16/bf16 weights "), std::string::npos) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(exact.out)["token_ids"], nlohmann::json::parse(plain.out)["token_ids"]);
  Output both = pagoda(run_base() + " --matmul-precision f32 --batched-bf16");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("choose one"), std::string::npos) << both.err;
  Output bad = pagoda(run_base() + " --matmul-precision bf8");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--matmul-precision"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace pagoda
