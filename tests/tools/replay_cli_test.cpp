// End-to-end tests of `pagoda replay` (cache mode): the JSON a user reads back on a slice of
// Mooncake's synthetic trace, the sweep, and clear errors for bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_data.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing::Output;
using testing::pagoda;
using testing::temp_dir;

std::string trace_path() { return testing::test_data_dir() + "/traces/mooncake-synthetic.jsonl"; }

TEST(ReplayCli, CacheModeOnATraceSliceWithASweep) {
  ASSERT_TRUE(testing::file_exists(trace_path())) << trace_path() << " is missing (PAGODA_TEST_DATA)";
  Output o = pagoda("replay --trace " + trace_path() + " --max-requests 300 --capacity-tokens 1M "
                    "--sweep-capacity 200K,2M --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["requests"], 300);
  EXPECT_EQ(j["mode"], "cache");
  EXPECT_EQ(j["capacity_tokens"], 1000000);
  EXPECT_EQ(j["capacity_blocks"], 1000000 / 16);
  const double hit = j["hit_rate"], ceiling = j["ceiling_hit_rate"];
  EXPECT_GT(ceiling, 0.0);
  EXPECT_LE(hit, ceiling);
  EXPECT_EQ(j["hit_rate_by_tier"]["pool"], hit);
  EXPECT_NEAR(hit, static_cast<double>(j["hit_tokens"]) / static_cast<double>(j["prompt_tokens"]), 1e-12);
  ASSERT_EQ(j["sweep"].size(), 2u);
  EXPECT_EQ(j["sweep"][0]["capacity_tokens"], 200000);
  EXPECT_LE(j["sweep"][0]["hit_rate"].get<double>(), j["sweep"][1]["hit_rate"].get<double>() + 1e-12);
  EXPECT_LE(j["sweep"][1]["hit_rate"].get<double>(), ceiling + 1e-12);

  Output table = pagoda("replay --trace " + trace_path() + " --max-requests 50 --block-size 512");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("50 requests"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("inf (ceiling)"), std::string::npos) << table.out;
}

TEST(ReplayCli, ClusterModeComparesPolicies) {
  ASSERT_TRUE(testing::file_exists(trace_path())) << trace_path() << " is missing (PAGODA_TEST_DATA)";
  Output o = pagoda("replay --trace " + trace_path() + " --max-requests 120 --instances 3 --capacity-tokens 500K "
                    "--block-size 512 --policy all --ttft-slo 2000 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["mode"], "cluster");
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["policy"], "kv-aware");
  EXPECT_EQ(j["runs"][2]["policy"], "round-robin");
  for (const json& run : j["runs"]) {
    EXPECT_EQ(run["requests"], 120);
    EXPECT_EQ(run["per_instance"].size(), 3u);
    EXPECT_LE(run["ttft_s"]["p50"].get<double>(), run["ttft_s"]["p99"].get<double>());
    EXPECT_GE(run["slo_attainment"].get<double>(), 0.0);
    EXPECT_LE(run["slo_attainment"].get<double>(), 1.0);
  }
  EXPECT_GE(j["runs"][0]["hit_rate"].get<double>(), j["runs"][2]["hit_rate"].get<double>());
  Output bad = pagoda("replay --trace " + trace_path() + " --instances 2 --capacity-tokens 1M --policy random");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown --policy 'random'"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --instances 2");
  EXPECT_NE(bad.err.find("cluster mode needs --capacity-tokens"), std::string::npos) << bad.err;
}

TEST(ReplayCli, PdSplitReportsTransfers) {
  ASSERT_TRUE(testing::file_exists(trace_path())) << trace_path() << " is missing (PAGODA_TEST_DATA)";
  Output o = pagoda("replay --trace " + trace_path() + " --max-requests 80 --prefill 2 --decode 1 --capacity-tokens 8GiB "
                    "--block-size 512 --model llama-3-70b --transfer-gbps 25 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["mode"], "pd");
  ASSERT_EQ(j["runs"][0]["per_instance"].size(), 3u);
  EXPECT_EQ(j["per_instance"], j["runs"][0]["per_instance"]);  // one policy: its figures at the top level too
  EXPECT_EQ(j["instances"], 3);                                // which keeps the count
  EXPECT_EQ(j["runs"][0]["per_instance"][0]["role"], "prefill");
  EXPECT_EQ(j["runs"][0]["per_instance"][2]["role"], "decode");
  EXPECT_GT(j["transfers"].get<int64_t>(), 0);
  EXPECT_EQ(j["transfer_bytes"].get<int64_t>() % 327680, 0);
  EXPECT_EQ(j["finished"].get<int64_t>() + j["rejected"].get<int64_t>(), 80);
  Output table = pagoda("replay --trace " + trace_path() + " --max-requests 30 --prefill 1 --decode 1 --capacity-tokens 2M "
                        "--block-size 512");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("1 prefill + 1 decode instances"), std::string::npos) << table.out;
  Output bad = pagoda("replay --trace " + trace_path() + " --prefill 2 --capacity-tokens 1M");
  EXPECT_NE(bad.err.find("needs both --prefill N and --decode M"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --prefill 1 --decode 1 --instances 2 --capacity-tokens 1M");
  EXPECT_NE(bad.err.find("not both"), std::string::npos) << bad.err;
}

// --remote-tokens: a Redis-like tier at the bottom of cache mode's stack, with its own line in
// the JSON; in bytes with --model; cache mode's tiers are refused in cluster mode.
TEST(ReplayCli, RemoteTierInCacheMode) {
  ASSERT_TRUE(testing::file_exists(trace_path())) << trace_path() << " is missing (PAGODA_TEST_DATA)";
  Output o = pagoda("replay --trace " + trace_path() + " --max-requests 300 --capacity-tokens 200K --remote-tokens 4M "
                    "--block-size 512 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_EQ(j["tiers"].size(), 1u) << o.out;
  EXPECT_EQ(j["tiers"][0]["tier"], "remote");
  EXPECT_GT(j["tiers"][0]["hit_tokens"].get<int64_t>(), 0);
  EXPECT_GT(j["hit_rate_by_tier"]["remote"].get<double>(), 0.0);
  EXPECT_NEAR(j["hit_rate_by_tier"]["pool"].get<double>() + j["hit_rate_by_tier"]["remote"].get<double>(),
              j["hit_rate"].get<double>(), 1e-12);
  Output bytes = pagoda("replay --trace " + trace_path() + " --max-requests 50 --model llama-3-70b --capacity-tokens 16GiB "
                        "--remote-tokens 100GB --json");
  ASSERT_EQ(bytes.exit_code, 0) << bytes.err;
  EXPECT_EQ(json::parse(bytes.out)["tiers"][0]["capacity_blocks"], int64_t{100000000000} / 327680 / 16);
  Output cluster = pagoda("replay --trace " + trace_path() + " --max-requests 50 --instances 2 --capacity-tokens 1M "
                          "--remote-tokens 4M");
  EXPECT_EQ(cluster.exit_code, 1);
  EXPECT_NE(cluster.err.find("--global-pool-tokens"), std::string::npos) << cluster.err;
  Output unbounded = pagoda("replay --trace " + trace_path() + " --max-requests 50 --remote-tokens 4M");
  EXPECT_EQ(unbounded.exit_code, 1);
  EXPECT_NE(unbounded.err.find("--remote-tokens need a pool"), std::string::npos) << unbounded.err;
}

TEST(ReplayCli, BadInputGetsAClearError) {
  const std::string bad = temp_dir() + "/bad_trace.jsonl";
  std::ofstream(bad) << "{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1]}\n";
  Output o = pagoda("replay --trace " + bad);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_FALSE(o.signaled);
  EXPECT_NE(o.err.find("bad_trace.jsonl:1"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("needs 2 hash_ids"), std::string::npos) << o.err;
  o = pagoda("replay --trace " + trace_path() + " --capacity-tokens 3Q");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("bad token count '3Q'"), std::string::npos) << o.err;
  o = pagoda("replay --trace " + trace_path() + " --eviction fifo");
  EXPECT_NE(o.err.find("unknown --eviction 'fifo'"), std::string::npos) << o.err;
  o = pagoda("replay --trace /nonexistent.jsonl");
  EXPECT_NE(o.err.find("cannot open trace /nonexistent.jsonl"), std::string::npos) << o.err;
}

// A KV geometry turns byte sizes into tokens with kvcalc's arithmetic: llama-3-70b's f16 KV is
// 80 layers x 8 KV heads x 128 x (K + V) x 2 B = 327,680 B per token.
TEST(ReplayCli, ModelGeometrySizesInBytes) {
  ASSERT_TRUE(testing::file_exists(trace_path())) << trace_path() << " is missing (PAGODA_TEST_DATA)";
  Output o = pagoda("replay --trace " + trace_path() + " --max-requests 100 --model llama-3-70b --capacity-tokens 16GiB "
                    "--sweep-capacity 4GiB,1M --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["kv_bytes_per_token"], 327680);
  EXPECT_EQ(j["capacity_tokens"], (int64_t{16} << 30) / 327680);
  EXPECT_EQ(j["capacity_bytes"], static_cast<double>((int64_t{16} << 30) / 327680 * 327680));
  EXPECT_EQ(j["sweep"][0]["capacity_tokens"], (int64_t{4} << 30) / 327680);
  EXPECT_EQ(j["sweep"][1]["capacity_tokens"], 1000000);
  EXPECT_NE(j["geometry"].get<std::string>().find("llama-3-70b"), std::string::npos);
  // fp8 (with its scales): kvcalc's bytes per token, so the same 16 GiB hold about twice the tokens.
  Output calc = pagoda("kvcalc llama-3-70b --kv-dtype fp8-e4m3 --json");
  ASSERT_EQ(calc.exit_code, 0) << calc.err;
  const double fp8 = json::parse(calc.out)["rows"][0]["bytes_per_token"];
  o = pagoda("replay --trace " + trace_path() + " --max-requests 20 --model llama-3-70b --kv-dtype fp8-e4m3 "
             "--capacity-tokens 16GiB --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  j = json::parse(o.out);
  EXPECT_EQ(j["kv_bytes_per_token"], fp8);
  EXPECT_EQ(j["capacity_tokens"], static_cast<int64_t>(std::floor(static_cast<double>(int64_t{16} << 30) / fp8)));
  EXPECT_GT(j["capacity_tokens"].get<int64_t>(), (int64_t{16} << 30) / 327680 * 19 / 10);
  // A GGUF's own geometry, in the table too.
  const std::string gguf = testing::test_data_dir() + "/models/stories260K/stories260K.gguf";
  ASSERT_TRUE(testing::file_exists(gguf));
  Output table = pagoda("replay --trace " + trace_path() + " --max-requests 20 --model " + gguf + " --capacity-tokens 1MiB");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("B/token"), std::string::npos) << table.out;
  // Cluster mode reads the same sizes.
  o = pagoda("replay --trace " + trace_path() + " --max-requests 40 --instances 2 --block-size 512 --model llama-3-70b "
             "--capacity-tokens 64GiB --global-pool-tokens 1TiB --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  j = json::parse(o.out);
  EXPECT_EQ(j["capacity_tokens"], (int64_t{64} << 30) / 327680);
  EXPECT_EQ(j["kv_bytes_per_token"], 327680);
  // Errors name what is wrong.
  Output bad = pagoda("replay --trace " + trace_path() + " --capacity-tokens 16GiB");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("'16GiB' is bytes: give --model"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --model NoSuchModel");
  EXPECT_NE(bad.err.find("neither a file nor a preset"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --model llama-3-70b --kv-dtype f12");
  EXPECT_NE(bad.err.find("unknown --kv-dtype 'f12'"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --model llama-3-70b --kv-bytes-per-token 100");
  EXPECT_NE(bad.err.find("not both"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --model llama-3-70b --capacity-tokens 1B");
  EXPECT_NE(bad.err.find("less than one token"), std::string::npos) << bad.err;
  bad = pagoda("replay --trace " + trace_path() + " --model llama-3-70b --capacity-tokens xGiB");
  EXPECT_NE(bad.err.find("bad size 'xGiB'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace pagoda
