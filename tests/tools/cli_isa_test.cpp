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

}  // namespace
}  // namespace pagoda
