// The HTTP server over the real continuous-batching engine and a real model (stories260K),
// driven by the official openai npm client and by plain HTTP.
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "shell.h"
#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

std::string reference_text() {
  return read_file_or_empty(stories_dir() + "/expected/greedy_prompt_once_upon_a_time_n256.txt");
}

TEST_F(RealServerTest, OpenAiClientCompletionsChatStreamingAndErrors) {
  const ScriptRun run = run_node("completions.mjs", url_);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json out = json::parse(run.last_line);
  EXPECT_EQ(out["model"], "stories260K");
  // Greedy text is llama2.c's reference output, character for character.
  const std::string text = "Once upon a time" + out["greedy_text"].get<std::string>();
  EXPECT_EQ(reference_text().rfind(text, 0), 0u) << text;
  EXPECT_GT(out["greedy_text"].get<std::string>().size(), 40u);
  expect_idle_and_intact();
}

TEST_F(RealServerTest, ConcurrentClientsGetTheirSingleRequestAnswers) {
  const ScriptRun run = run_node("concurrent.mjs", url_ + " no-key 32");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(json::parse(run.last_line)["clients"], 32);
  expect_idle_and_intact();
}

TEST_F(RealServerTest, PlainHttpEdgeCases) {
  EXPECT_EQ(client_->Post("/v1/completions", "{\"prompt\": [1, 2,", "application/json")->status, 400);
  EXPECT_EQ(client_->Post("/v1/completions", "not json at all", "text/plain")->status, 400);
  EXPECT_EQ(post("/v1/completions", {{"prompt", 42}})->status, 400);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"n", "2"}})->status, 400);
  EXPECT_EQ(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", {1, 2}}}}}})->status, 400);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1LL << 40}})->status, 400);
  EXPECT_EQ(client_->Post("/v1/completions", "{\"prompt\": \"caf\xc3\"}", "application/json")->status, 400);
  std::vector<int32_t> too_long(kContext + 1, 403);
  auto long_prompt = post("/v1/completions", {{"prompt", too_long}});
  EXPECT_EQ(long_prompt->status, 413) << long_prompt->body;

  // Unknown fields are ignored; max_tokens beyond what the context leaves is clipped to it.
  std::vector<int32_t> prompt(kContext - 8, 403);
  prompt[0] = 1;
  auto clipped = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", kContext}, {"ignore_eos", true},
                                          {"temperature", 0}, {"x_unknown", {{"a", 1}}}});
  ASSERT_EQ(clipped->status, 200) << clipped->body;
  const json j = json::parse(clipped->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_LE(j["usage"]["completion_tokens"].get<int64_t>() + j["usage"]["prompt_tokens"].get<int64_t>(), kContext);
  EXPECT_GE(j["usage"]["completion_tokens"].get<int64_t>(), 7);
  expect_idle_and_intact();
}

TEST_F(RealServerTest, ClientThatHangsUpHasItsBlocksFreed) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}};
  const int fd = send_raw(port_, post_request("/v1/completions", body.dump()));
  std::string got;
  char buf[1024];
  while (got.find("data: {") == std::string::npos) {  // generation is under way
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // The server notices within a poll interval and aborts; poll until the request has ended
  // either way (aborted, or the 400 tokens ran out: the test then fails below).
  auto ended = [&] {
    const engine::ServingMetrics m = serving_->metrics();
    return m.finished_abort + m.finished_length + m.finished_stop > 0;
  };
  for (int i = 0; i < 3000 && !ended(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  serving_->check_integrity();  // between steps: the metrics of the last one are published
  const engine::ServingMetrics m = serving_->metrics();
  EXPECT_EQ(m.finished_abort, 1);
  EXPECT_LT(m.generation_tokens, 400) << "the request ran to its end instead of being aborted";
  expect_idle_and_intact();
}

TEST_F(RealServerTest, MetricsScrapePassesPromtool) {
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(post("/v1/completions", {{"prompt", reference_text().substr(0, 200)}, {"max_tokens", 4}})->status, 200);
  }
  serving_->check_integrity();  // runs between steps: the last step has published its metrics
  auto r = client_->Get("/metrics");
  ASSERT_EQ(r->status, 200);
  const ShellRun promtool = run_shell("promtool check metrics 2>&1 <<'EOF'\n" + r->body + "EOF\n");
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out << r->body;
  const engine::ServingMetrics m = serving_->metrics();
  EXPECT_GT(m.prefix_hit_tokens, 0) << "the second identical prompt hits the prefix cache";
  EXPECT_NE(r->body.find("pagoda_prefix_cache_hit_tokens_total " + std::to_string(m.prefix_hit_tokens) + "\n"),
            std::string::npos);
  EXPECT_EQ(m.ttft.count, 2);
}

}  // namespace
}  // namespace pagoda::testing
