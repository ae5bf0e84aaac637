// `pagoda serve` with smaller KV: a deepseek2 (MLA) model written by `pagoda make-model` answers
// completions (n > 1, a prefix-cache hit on the second identical prompt, int8 latent KV), and
// StreamingLLM (--kv-window/--kv-sinks) serves requests past the pool's capacity, n > 1 included.
#include <cstdio>

#include "pagoda_process.h"
#include "server_fixture.h"
#include "shell.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

int port_of(const std::string& url_line) {
  const size_t colon = url_line.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(url_line.c_str() + colon + 1);
}

json post(int port, const json& body) {
  const std::string cmd = "curl -s -X POST -H 'Content-Type: application/json' http://127.0.0.1:" + std::to_string(port) +
                          "/v1/completions -d '" + body.dump() + "'";
  const std::string out = run_shell(cmd).out;
  return json::parse(out, nullptr, /*allow_exceptions=*/false);
}

std::string mla_model() {
  const std::string path = ::testing::TempDir() + "/pagoda-tiny-mla-q.gguf";
  const ShellRun made = run_shell(std::string(PAGODA_BIN_DIR) + "/pagoda make-model --shape tiny-mla-q -q -o " + path);
  EXPECT_EQ(made.exit_code, 0) << made.out;
  return path;
}

TEST(ServeSmallKv, DeepseekMlaModelAnswersWithPrefixCacheAndInt8Latents) {
  PagodaProcess serve("serve -m " + mla_model() + " --port 0 -t 1 --kv-dtype int8");
  const std::string url = serve.line();
  const int port = port_of(url);
  ASSERT_GT(port, 0) << url << serve.err();
  EXPECT_NE(serve.err().find("MLA latent cache"), std::string::npos) << serve.err();
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "ab ";
  const json body = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  json first = post(port, body);
  ASSERT_TRUE(first.contains("choices")) << first.dump();
  json second = post(port, body);
  ASSERT_TRUE(second.contains("choices")) << second;
  EXPECT_EQ(first["choices"][0]["text"], second["choices"][0]["text"]);
  EXPECT_EQ(first["usage"]["completion_tokens"], 6);
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second;
  json multi = body;
  multi["n"] = 3;
  multi["temperature"] = 1.0;
  multi["seed"] = 4;
  json three = post(port, multi);
  ASSERT_TRUE(three.contains("choices")) << three.dump();
  ASSERT_EQ(three["choices"].size(), 3u) << three;
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
}

TEST(ServeSmallKv, StreamingWindowServesPastThePool) {
  // 200K holds 10 blocks of 16 tokens; each request generates 300 tokens in a 4 + 64 window.
  PagodaProcess serve("serve -m " + stories_dir() + "/stories260K.gguf -c 512 --port 0 -t 1 --kv-cache-mem 200K "
                      "--kv-window 64 --kv-sinks 4");
  const int port = port_of(serve.line());
  ASSERT_GT(port, 0) << serve.err();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"ignore_eos", true}, {"n", 2}, {"seed", 1}};
  json reply = post(port, body);
  ASSERT_TRUE(reply.contains("choices")) << reply.dump() << serve.err();
  ASSERT_EQ(reply["choices"].size(), 2u) << reply;
  EXPECT_EQ(reply["usage"]["completion_tokens"], 600) << reply;
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
}

}  // namespace
}  // namespace pagoda::testing
