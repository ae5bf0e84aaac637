// End-to-end tests of `pagoda bench-serve` against a scripted OpenAI-style server in this
// process (httplib::Server): the tool is run as a user runs it, and the server checks what it
// receives. The scripted server answers every request with max_tokens chunks " r0", " r1", ...
// and a usage chunk whose prompt_tokens is the prompt's word count and whose cached_tokens is
// the longest word prefix shared with any earlier prompt (a toy prefix cache). No timing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing::Output;
using testing::pagoda;

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) words.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return words;
}

class ScriptedServer {
 public:
  // failures: request k (0-based, in arrival order) fails with HTTP 503 when k % 3 == 1 and
  // with an error event mid-stream when k % 3 == 2.
  explicit ScriptedServer(bool failures = false) : failures_(failures) {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"scripted-model","object":"model"}]})", "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    server_.Post("/v1/chat/completions",
                 [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // The socket listens from bind_to_any_port on; wait for the accept loop anyway.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~ScriptedServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  struct Received {
    json body;
    int64_t prompt_tokens = 0, cached_tokens = 0;
  };
  std::vector<Received> received() {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }

 private:
  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      res.status = 400;
      return;
    }
    std::vector<std::string> words;
    if (chat) {
      for (const json& m : body["messages"]) {
        for (auto& w : split_words(m["content"].get<std::string>())) words.push_back(w);
      }
    } else if (body["prompt"].is_array()) {  // token ids (the trace workload)
      for (const json& id : body["prompt"]) words.push_back(id.dump());
    } else {
      words = split_words(body["prompt"].get<std::string>());
    }
    int64_t k = 0, cached = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& earlier : prompts_) {
        size_t n = 0;
        while (n < earlier.size() && n < words.size() && earlier[n] == words[n]) ++n;
        cached = std::max<int64_t>(cached, static_cast<int64_t>(n));
      }
      prompts_.push_back(words);
      k = static_cast<int64_t>(received_.size());
      received_.push_back({body, static_cast<int64_t>(words.size()), cached});
    }
    if (failures_ && k % 3 == 1) {
      res.status = 503;
      res.set_content(R"({"error":{"message":"busy","type":"unavailable"}})", "application/json");
      return;
    }
    const bool error_event = failures_ && k % 3 == 2;
    const int64_t n = body.value("max_tokens", 1);
    std::string stream;
    auto event = [&](const json& j) { stream += "data: " + j.dump() + "\n\n"; };
    if (chat) event({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}}}}}}});
    for (int64_t i = 0; i < n; ++i) {
      const std::string text = " r" + std::to_string(i);
      if (chat) {
        event({{"choices", {{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", nullptr}}}}});
      } else {
        event({{"choices", {{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}}}});
      }
      if (error_event) {
        event({{"error", {{"message", "boom"}}}});
        break;
      }
    }
    if (!error_event) {
      event({{"choices", json::array()},
             {"usage",
              {{"prompt_tokens", words.size()},
               {"completion_tokens", n},
               {"total_tokens", static_cast<int64_t>(words.size()) + n},
               {"prompt_tokens_details", {{"cached_tokens", cached}}}}}});
      stream += "data: [DONE]\n\n";
    }
    res.set_chunked_content_provider("text/event-stream", [stream](size_t, httplib::DataSink& sink) {
      // Several writes, so the client sees the stream in pieces.
      for (size_t i = 0; i < stream.size(); i += 37) sink.write(stream.data() + i, std::min<size_t>(37, stream.size() - i));
      sink.done();
      return true;
    });
  }

  const bool failures_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<Received> received_;
  std::vector<std::vector<std::string>> prompts_;
};

json run_json(const std::string& args, int expected_exit = 0) {
  Output o = pagoda("bench-serve " + args);
  EXPECT_FALSE(o.signaled) << args << "\n" << o.err;
  EXPECT_EQ(o.exit_code, expected_exit) << args << "\n" << o.err;
  json j = json::parse(o.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << o.out << "\n" << o.err;
  return j;
}

void expect_standard_body(const json& body, const std::string& model = "scripted-model") {
  EXPECT_EQ(body["model"], model);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0);
}

TEST(BenchServe, RandomClosedLoopSendsThePlannedPromptsAndCountsUsage) {
  ScriptedServer server;
  const std::string args = "--url " + server.url() + " --workload random --num-requests 7 --concurrency 3 "
                           "--prompt-len 2:6 --output-len 1:4 --seed 3";
  const json plan = run_json(args + " --dry-run");
  const json report = run_json(args + " --json");

  std::multimap<std::string, int64_t> planned;  // prompt -> max_tokens
  int64_t planned_tokens = 0;
  for (const json& s : plan["sessions"]) {
    ASSERT_EQ(s["turns"].size(), 1u);
    planned.emplace(s["turns"][0]["user_text"], s["turns"][0]["max_tokens"]);
    planned_tokens += s["turns"][0]["max_tokens"].get<int64_t>();
  }
  std::multimap<std::string, int64_t> got;
  int64_t prompt_words = 0;
  for (const auto& r : server.received()) {
    expect_standard_body(r.body);
    got.emplace(r.body["prompt"], r.body["max_tokens"]);
    prompt_words += r.prompt_tokens;
  }
  EXPECT_EQ(got, planned);
  const json& s = report["summary"];
  EXPECT_EQ(s["succeeded"], 7);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["missing_usage"], 0);
  EXPECT_EQ(s["completion_tokens"], planned_tokens);
  EXPECT_EQ(s["prompt_tokens"], prompt_words);
  EXPECT_EQ(s["ttft_ms"]["count"], 7);
  EXPECT_EQ(s["itl_ms"]["count"], planned_tokens - 7);  // one text chunk per token: n - 1 gaps each
  EXPECT_EQ(report["config"]["mode"], "closed-loop");
  EXPECT_EQ(report["config"]["concurrency"], 3);
  EXPECT_EQ(report["config"]["model"], "scripted-model");
}

TEST(BenchServe, SharedPrefixReallySharesTheSystemPromptAndReportsTheHitRate) {
  ScriptedServer server;
  const std::string args = "--url " + server.url() + " --model m1 --workload shared-prefix --num-requests 5 "
                           "--concurrency 1 --system-prompt-len 20 --prompt-len 4 --output-len 2";
  const json plan = run_json(args + " --dry-run");
  const json report = run_json(args + " --json");
  const std::string system = plan["system_prompt"];
  EXPECT_EQ(split_words(system).size(), 20u);
  int64_t prompt = 0, cached = 0;
  const auto received = server.received();
  ASSERT_EQ(received.size(), 5u);
  for (const auto& r : received) {
    expect_standard_body(r.body, "m1");
    const std::string p = r.body["prompt"];
    EXPECT_EQ(p.rfind(system + " ", 0), 0u) << p;
    EXPECT_EQ(split_words(p).size(), 24u);
    prompt += r.prompt_tokens;
    cached += r.cached_tokens;
  }
  EXPECT_GE(cached, 4 * 20);  // every request after the first reuses at least the system prompt
  const json& s = report["summary"];
  EXPECT_EQ(s["cached_tokens"], cached);
  EXPECT_DOUBLE_EQ(s["prefix_cache_hit_rate"].get<double>(), static_cast<double>(cached) / static_cast<double>(prompt));
}

TEST(BenchServe, MultiTurnResendsTheGrowingHistoryWithTheStreamedReplies) {
  ScriptedServer server;
  const json report = run_json("--url " + server.url() + " --workload multi-turn --sessions 2 --turns 3 "
                               "--concurrency 2 --system-prompt-len 4 --prompt-len 3 --output-len 2:5 --json");
  EXPECT_EQ(report["summary"]["succeeded"], 6);
  // Group the chat requests by session (its first user message), in arrival order.
  std::map<std::string, std::vector<json>> sessions;
  for (const auto& r : server.received()) {
    expect_standard_body(r.body);
    const json& m = r.body["messages"];
    ASSERT_GE(m.size(), 2u);
    EXPECT_EQ(m[0]["role"], "system");
    sessions[m[1]["content"]].push_back(r.body);
  }
  ASSERT_EQ(sessions.size(), 2u);
  for (const auto& [first, turns] : sessions) {
    ASSERT_EQ(turns.size(), 3u);
    for (size_t t = 0; t < turns.size(); ++t) {
      const json& m = turns[t]["messages"];
      ASSERT_EQ(m.size(), 2 + 2 * t);
      EXPECT_EQ(m.back()["role"], "user");
      if (t == 0) continue;
      const json& prev = turns[t - 1]["messages"];
      for (size_t i = 0; i < prev.size(); ++i) EXPECT_EQ(m[i], prev[i]);  // history kept verbatim
      const json& reply = m[prev.size()];
      EXPECT_EQ(reply["role"], "assistant");
      std::string expected;  // what the scripted server streamed for the previous turn
      for (int64_t i = 0; i < turns[t - 1]["max_tokens"].get<int64_t>(); ++i) expected += " r" + std::to_string(i);
      EXPECT_EQ(reply["content"], expected);
    }
  }
  EXPECT_GT(report["summary"]["prefix_cache_hit_rate"].get<double>(), 0.3);
}

TEST(BenchServe, InterleavedSessionsTakeTurnsRoundRobin) {
  // One worker, so the arrival order is the order turns are taken in.
  for (const bool interleave : {false, true}) {
    ScriptedServer server;
    const json report = run_json("--url " + server.url() + " --workload multi-turn --sessions 3 --turns 2 "
                                 "--concurrency 1 --prompt-len 3 --output-len 2 --json" +
                                 std::string(interleave ? " --interleave" : ""));
    EXPECT_EQ(report["summary"]["succeeded"], 6);
    EXPECT_EQ(report["config"]["interleave"], interleave);
    std::vector<size_t> sizes;       // messages per request, in arrival order
    std::vector<std::string> firsts;  // the session (its first user message) of each request
    for (const auto& r : server.received()) {
      sizes.push_back(r.body["messages"].size());
      firsts.push_back(r.body["messages"][0]["content"]);
    }
    ASSERT_EQ(sizes.size(), 6u);
    if (interleave) {
      EXPECT_EQ(sizes, (std::vector<size_t>{1, 1, 1, 3, 3, 3}));
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(firsts[i], firsts[i + 3]);  // the same session order each round
      EXPECT_NE(firsts[0], firsts[1]);
      EXPECT_NE(firsts[1], firsts[2]);
    } else {
      EXPECT_EQ(sizes, (std::vector<size_t>{1, 3, 1, 3, 1, 3}));
    }
  }
}

TEST(BenchServe, PoissonArrivalsAreDeterministicGivenTheSeed) {
  ScriptedServer server;
  const std::string base = "--url " + server.url() + " --num-requests 8 --rate 500 --prompt-len 3 --output-len 1";
  const json a = run_json(base + " --seed 11 --dry-run");
  const json b = run_json(base + " --seed 11 --dry-run");
  const json c = run_json(base + " --seed 12 --dry-run");
  EXPECT_EQ(a, b);
  EXPECT_NE(a["sessions"][0]["arrival_s"], c["sessions"][0]["arrival_s"]);
  double last = 0;
  for (const json& s : a["sessions"]) {
    EXPECT_GT(s["arrival_s"].get<double>(), last);
    last = s["arrival_s"];
  }
  const json report = run_json(base + " --seed 11 --json");
  EXPECT_EQ(report["config"]["mode"], "open-loop");
  EXPECT_EQ(report["summary"]["succeeded"], 8);
  std::multiset<std::string> planned, got;
  for (const json& s : a["sessions"]) planned.insert(s["turns"][0]["user_text"].get<std::string>());
  for (const auto& r : server.received()) got.insert(r.body["prompt"].get<std::string>());
  EXPECT_EQ(got, planned);
}

TEST(BenchServe, ServerErrorsAreCountedAndReported) {
  ScriptedServer server(/*failures=*/true);
  const json report = run_json("--url " + server.url() + " --num-requests 6 --concurrency 1 --output-len 3 --json");
  const json& s = report["summary"];
  EXPECT_EQ(s["succeeded"], 2);
  EXPECT_EQ(s["failed"], 4);
  EXPECT_EQ(s["errors"]["HTTP 503: busy"], 2);
  EXPECT_EQ(s["errors"]["error event: boom"], 2);
  EXPECT_EQ(s["completion_tokens"], 6);

  // Multi-turn: after a failed turn the session's later turns are not sent.
  ScriptedServer chat_server(/*failures=*/true);
  const json chat = run_json("--url " + chat_server.url() + " --workload multi-turn --sessions 1 --turns 4 --json");
  EXPECT_EQ(chat["summary"]["succeeded"], 1);
  EXPECT_EQ(chat["summary"]["failed"], 3);
  EXPECT_EQ(chat["summary"]["errors"]["not sent: an earlier turn of its session failed"], 2);
  EXPECT_EQ(chat_server.received().size(), 2u);
}

TEST(BenchServe, UnreachableServerFailsEveryRequestWithoutCrashing) {
  const json report = run_json("--url http://127.0.0.1:1 --model x --num-requests 3 --concurrency 2 --timeout 5 --json",
                               /*expected_exit=*/1);
  EXPECT_EQ(report["summary"]["failed"], 3);
  ASSERT_EQ(report["summary"]["errors"].size(), 1u);
  EXPECT_EQ(report["summary"]["errors"].begin().key().rfind("connection: ", 0), 0u);
}

// A trace's requests go out as token-id prompts at their timestamps x --time-scale, with their
// output lengths as max_tokens; requests that share hash ids share their first tokens (the
// scripted server counts the shared run as cached).
TEST(BenchServe, TraceWorkloadSendsTokenIdsAtTheTracesTimes) {
  ScriptedServer server;
  const std::string trace = testing::temp_dir() + "/bench_trace.jsonl";
  {
    std::ofstream f(trace);
    f << R"({"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]})" << "\n";
    f << R"({"timestamp": 100, "input_length": 8, "output_length": 2, "hash_ids": [7, 8]})" << "\n";
    f << R"({"timestamp": 200, "input_length": 5, "output_length": 0, "hash_ids": [5, 6]})" << "\n";
  }
  const std::string args = "--url " + server.url() + " --workload trace --trace " + trace +
                           " --trace-block-tokens 4 --time-scale 0.5 --vocab-size 500";
  const json plan = run_json(args + " --dry-run");
  ASSERT_EQ(plan["sessions"].size(), 3u);
  EXPECT_DOUBLE_EQ(plan["sessions"][1]["arrival_s"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(plan["sessions"][2]["arrival_s"].get<double>(), 0.1);
  EXPECT_EQ(plan["sessions"][0]["turns"][0]["prompt_tokens"], 10);
  EXPECT_EQ(plan["sessions"][2]["turns"][0]["max_tokens"], 1);  // at least one token
  const json report = run_json(args + " --json");
  EXPECT_EQ(report["summary"]["succeeded"], 3);
  EXPECT_EQ(report["config"]["mode"], "open-loop");
  auto got = server.received();
  ASSERT_EQ(got.size(), 3u);
  std::map<int64_t, json> by_len;
  for (const auto& r : got) {
    ASSERT_TRUE(r.body["prompt"].is_array());
    for (const json& id : r.body["prompt"]) EXPECT_LT(id.get<int64_t>(), 500);
    by_len[static_cast<int64_t>(r.body["prompt"].size())] = r.body;
  }
  ASSERT_EQ(by_len.count(10) + by_len.count(8) + by_len.count(5), 3u);
  EXPECT_EQ(by_len[10]["max_tokens"], 3);
  // The 8-token request's ids are the 10-token one's first 8 (hash ids 7, 8).
  for (int i = 0; i < 8; ++i) EXPECT_EQ(by_len[8]["prompt"][i], by_len[10]["prompt"][i]);
  EXPECT_NE(by_len[5]["prompt"][0], by_len[10]["prompt"][0]);
  Output bad = pagoda("bench-serve --url " + server.url() + " --workload trace");
  EXPECT_NE(bad.err.find("--workload trace needs --trace FILE"), std::string::npos) << bad.err;
}

TEST(BenchServe, BadOptionsGetClearErrors) {
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"--workload chat", "--workload must be"},
           {"--prompt-len 5:2", "--prompt-len"},
           {"--output-len abc", "--output-len must be"},
           {"--workload shared-prefix", "--system-prompt-len"},
           {"--url localhost:80", "--url must look like"},
           {"--concurrency 0", "--concurrency"},
           {"--rate 2 --concurrency 3", "excludes"},
       }) {
    Output o = pagoda("bench-serve --dry-run " + c.args);
    EXPECT_FALSE(o.signaled) << c.args;
    EXPECT_NE(o.exit_code, 0) << c.args;
    EXPECT_NE(o.err.find(c.needle), std::string::npos) << c.args << "\n" << o.err;
  }
}

}  // namespace
}  // namespace pagoda
