// Unit tests of bench-serve's pure parts: percentiles and aggregation, SSE parsing, chunk
// interpretation, URL parsing and the seeded workload plan.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tools/serve_bench_client.h"
#include "tools/serve_bench_stats.h"
#include "tools/serve_bench_workload.h"

namespace pagoda::tools {
namespace {

TEST(ServeBenchStats, PercentileInterpolatesBetweenRanks) {
  EXPECT_EQ(percentile({}, 0.5), 0);
  EXPECT_EQ(percentile({7}, 0.99), 7);
  // numpy.percentile([1..5], q) with linear interpolation.
  EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3}, 0.5), 3);
  EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3}, 0.9), 4.6);
  EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3}, 0.99), 4.96);
  EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3}, 0.0), 1);
  EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3}, 1.0), 5);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 0.25), 12.5);
}

TEST(ServeBenchStats, DistributionOfOneHundredValues) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Distribution d = distribution(v);
  EXPECT_EQ(d.count, 100);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.p50, 50.5);
  EXPECT_DOUBLE_EQ(d.p90, 90.1);
  EXPECT_DOUBLE_EQ(d.p99, 99.01);
  EXPECT_DOUBLE_EQ(d.max, 100);
}

RequestRecord ok_record(double send, std::vector<double> tokens, double end, int64_t prompt, int64_t completion,
                        int64_t cached) {
  RequestRecord r;
  r.ok = true;
  r.send_s = send;
  r.token_times_s = std::move(tokens);
  r.end_s = end;
  r.usage_seen = true;
  r.prompt_tokens = prompt;
  r.completion_tokens = completion;
  r.cached_tokens = cached;
  return r;
}

TEST(ServeBenchStats, SummarizeAggregatesSucceededAndCountsErrors) {
  std::vector<RequestRecord> records;
  records.push_back(ok_record(1.0, {1.5, 1.75, 2.0}, 2.0, 100, 3, 0));
  records.push_back(ok_record(2.0, {2.25, 3.25}, 5.0, 100, 5, 60));
  RequestRecord bad;
  bad.send_s = 0.5;
  bad.end_s = 0.6;
  bad.error = "HTTP 503: busy";
  records.push_back(bad);
  records.push_back(bad);
  RequestRecord cut = bad;  // failed at its end, after streaming 3 chunks
  cut.token_times_s = {0.75, 1.0, 1.125};
  cut.error = "error event: parse";
  records.push_back(cut);
  RequestRecord no_usage = ok_record(3.0, {4.0}, 4.0, 0, 1, 0);
  no_usage.usage_seen = false;
  records.push_back(no_usage);

  const BenchSummary s = summarize(records);
  EXPECT_EQ(s.requests, 6);
  EXPECT_EQ(s.succeeded, 3);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.failed_streamed_tokens, 3);
  EXPECT_EQ(s.errors.at("error event: parse"), 1);
  EXPECT_EQ(s.missing_usage, 1);
  EXPECT_EQ(s.errors.at("HTTP 503: busy"), 2);
  EXPECT_DOUBLE_EQ(s.duration_s, 4.5);  // first send 0.5 -> last end 5.0
  EXPECT_EQ(s.prompt_tokens, 200);
  EXPECT_EQ(s.completion_tokens, 9);
  EXPECT_EQ(s.cached_tokens, 60);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 3 / 4.5);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 9 / 4.5);
  EXPECT_DOUBLE_EQ(s.streamed_tokens_per_s, 12 / 4.5);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate, 0.3);
  // TTFT: 0.5, 0.25, 1.0 (succeeded only); ITL: 0.25, 0.25, 1.0 and the failed stream's
  // 0.25, 0.125; E2E: 1, 3, 1.
  EXPECT_EQ(s.ttft_s.count, 3);
  EXPECT_DOUBLE_EQ(s.ttft_s.p50, 0.5);
  EXPECT_EQ(s.itl_s.count, 5);
  EXPECT_DOUBLE_EQ(s.itl_s.p50, 0.25);
  EXPECT_DOUBLE_EQ(s.itl_s.mean, (0.25 + 0.25 + 1.0 + 0.25 + 0.125) / 5);
  EXPECT_DOUBLE_EQ(s.itl_s.max, 1.0);
  EXPECT_DOUBLE_EQ(s.e2e_s.p50, 1.0);
  EXPECT_DOUBLE_EQ(s.e2e_s.max, 3.0);
}

TEST(ServeBenchStats, SummarizeOfNothingIsZero) {
  const BenchSummary s = summarize({});
  EXPECT_EQ(s.requests, 0);
  EXPECT_EQ(s.duration_s, 0);
  EXPECT_EQ(s.requests_per_s, 0);
  EXPECT_EQ(s.prefix_cache_hit_rate, 0);
}

TEST(ServeBenchSse, SplitsEventsAcrossArbitraryChunkBoundaries) {
  const std::string stream =
      "data: {\"a\":1}\n\n: comment\n\nevent: x\ndata: line1\ndata: line2\n\r\n"
      "data: {\"b\":2}\r\n\r\ndata: [DONE]\n\n";
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    SseParser parser;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += piece) {
      parser.feed(std::string_view(stream).substr(i, piece), [&](const std::string& d) { got.push_back(d); });
    }
    ASSERT_EQ(got.size(), 4u) << "piece " << piece;
    EXPECT_EQ(got[0], "{\"a\":1}");
    EXPECT_EQ(got[1], "line1\nline2");
    EXPECT_EQ(got[2], "{\"b\":2}");
    EXPECT_EQ(got[3], "[DONE]");
    EXPECT_FALSE(parser.has_partial_event());
  }
}

TEST(ServeBenchSse, InterpretsTextDeltasUsageAndErrors) {
  EXPECT_TRUE(interpret_chunk("[DONE]").done);
  EXPECT_EQ(interpret_chunk(R"({"choices":[{"index":0,"text":" hi","finish_reason":null}]})").text, " hi");
  EXPECT_EQ(interpret_chunk(R"({"choices":[{"index":0,"delta":{"content":"yo"}}]})").text, "yo");
  EXPECT_EQ(interpret_chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})").text, "");
  EXPECT_EQ(interpret_chunk(R"({"choices":[{"index":0,"delta":{"content":null}}]})").text, "");

  const ChunkInfo usage = interpret_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":32}}})");
  EXPECT_TRUE(usage.has_usage);
  EXPECT_EQ(usage.prompt_tokens, 40);
  EXPECT_EQ(usage.completion_tokens, 8);
  EXPECT_EQ(usage.cached_tokens, 32);
  EXPECT_FALSE(interpret_chunk(R"({"choices":[],"usage":null})").has_usage);
  const ChunkInfo no_details = interpret_chunk(R"({"usage":{"prompt_tokens":4,"completion_tokens":2}})");
  EXPECT_TRUE(no_details.has_usage);
  EXPECT_EQ(no_details.cached_tokens, 0);

  EXPECT_EQ(interpret_chunk(R"({"error":{"message":"out of memory"}})").error, "error event: out of memory");
  EXPECT_NE(interpret_chunk("not json").error.find("unreadable"), std::string::npos);
  EXPECT_NE(interpret_chunk("[1,2]").error.find("unreadable"), std::string::npos);
}

TEST(ServeBenchUrl, SplitsOriginAndPrefix) {
  Result<ServerUrl> a = parse_server_url("http://127.0.0.1:8080");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->origin, "http://127.0.0.1:8080");
  EXPECT_EQ(a->prefix, "");
  Result<ServerUrl> b = parse_server_url("http://host:1/api/");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->origin, "http://host:1");
  EXPECT_EQ(b->prefix, "/api");
  EXPECT_FALSE(parse_server_url("127.0.0.1:8080").is_ok());
  EXPECT_FALSE(parse_server_url("ftp://x").is_ok());
  EXPECT_FALSE(parse_server_url("http://").is_ok());
}

size_t word_count(const std::string& s) {
  if (s.empty()) return 0;
  return static_cast<size_t>(std::count(s.begin(), s.end(), ' ')) + 1;
}

TEST(ServeBenchWorkload, SameSeedSamePlanAndLengthsInRange) {
  WorkloadOptions o;
  o.num_requests = 50;
  o.prompt_len_min = 3;
  o.prompt_len_max = 9;
  o.output_len_min = 2;
  o.output_len_max = 5;
  o.rate = 4;
  o.seed = 7;
  ASSERT_TRUE(validate(o).is_ok());
  const WorkloadPlan a = plan_workload(o);
  const WorkloadPlan b = plan_workload(o);
  ASSERT_EQ(a.sessions.size(), 50u);
  std::set<int64_t> lengths;
  for (size_t i = 0; i < a.sessions.size(); ++i) {
    ASSERT_EQ(a.sessions[i].turns.size(), 1u);
    EXPECT_EQ(a.sessions[i].turns[0].user_text, b.sessions[i].turns[0].user_text);
    EXPECT_EQ(a.sessions[i].arrival_s, b.sessions[i].arrival_s);
    const size_t words = word_count(a.sessions[i].turns[0].user_text);
    EXPECT_GE(words, 3u);
    EXPECT_LE(words, 9u);
    EXPECT_GE(a.sessions[i].turns[0].max_tokens, 2);
    EXPECT_LE(a.sessions[i].turns[0].max_tokens, 5);
    lengths.insert(static_cast<int64_t>(words));
    if (i > 0) EXPECT_GT(a.sessions[i].arrival_s, a.sessions[i - 1].arrival_s);
  }
  EXPECT_GT(lengths.size(), 3u);  // lengths really vary
  o.seed = 8;
  const WorkloadPlan c = plan_workload(o);
  EXPECT_NE(c.sessions[0].turns[0].user_text, a.sessions[0].turns[0].user_text);
  EXPECT_NE(c.sessions[0].arrival_s, a.sessions[0].arrival_s);
}

TEST(ServeBenchWorkload, PoissonGapsHaveMeanOneOverRate) {
  WorkloadOptions o;
  o.num_requests = 20000;
  o.rate = 5;
  o.prompt_len_min = o.prompt_len_max = 1;
  const WorkloadPlan p = plan_workload(o);
  const double mean_gap = p.sessions.back().arrival_s / 20000.0;
  EXPECT_NEAR(mean_gap, 0.2, 0.01);
  // Exponential: about e^-1 of the gaps exceed the mean.
  int above = 0;
  for (size_t i = 1; i < p.sessions.size(); ++i) above += (p.sessions[i].arrival_s - p.sessions[i - 1].arrival_s) > 0.2;
  EXPECT_NEAR(above / 20000.0, std::exp(-1.0), 0.02);
}

TEST(ServeBenchWorkload, ClosedLoopHasNoArrivalTimesAndMultiTurnHasTurns) {
  WorkloadOptions o;
  o.kind = WorkloadKind::kMultiTurn;
  o.sessions = 3;
  o.turns = 5;
  o.system_prompt_len = 12;
  const WorkloadPlan p = plan_workload(o);
  EXPECT_EQ(p.total_requests(), 15);
  EXPECT_EQ(word_count(p.system_prompt), 12u);
  for (const PlannedSession& s : p.sessions) {
    EXPECT_EQ(s.arrival_s, 0);
    EXPECT_EQ(s.turns.size(), 5u);
  }
}

TEST(ServeBenchWorkload, RejectsBadOptions) {
  WorkloadOptions o;
  o.prompt_len_min = 5;
  o.prompt_len_max = 4;
  EXPECT_FALSE(validate(o).is_ok());
  o = {};
  o.kind = WorkloadKind::kSharedPrefix;
  EXPECT_NE(validate(o).message().find("system-prompt-len"), std::string::npos);
  o = {};
  o.rate = -1;
  EXPECT_FALSE(validate(o).is_ok());
  o = {};
  o.num_requests = 0;
  EXPECT_FALSE(validate(o).is_ok());
  EXPECT_TRUE(parse_workload_kind("multi-turn").is_ok());
  EXPECT_FALSE(parse_workload_kind("chat").is_ok());
}

}  // namespace
}  // namespace pagoda::tools
