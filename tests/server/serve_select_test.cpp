// `pagoda serve` with attention-score KV selection (H2O/SnapKV): the per-request body field
// `kv_select` on completions and chat (a budget at least the length equals the full cache bit
// for bit: text and logprobs; a small budget generates past it, never prefix-cached), clear
// 400s for bad values, explain naming the cause, and `--kv-select` as the server's default that
// a request may turn off; a windowed server refuses selection with a 400.
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

struct Reply {
  int code = 0;
  json body;
};

Reply post(int port, const std::string& path, const json& body) {
  const std::string out = run_shell("curl -s -w '\\n%{http_code}' -X POST -H 'Content-Type: application/json' http://127.0.0.1:" +
                                    std::to_string(port) + path + " -d '" + body.dump() + "'")
                              .out;
  const size_t nl = out.rfind('\n');
  Reply r;
  r.code = nl == std::string::npos ? 0 : std::atoi(out.c_str() + nl + 1);
  r.body = json::parse(out.substr(0, nl == std::string::npos ? 0 : nl), nullptr, /*allow_exceptions=*/false);
  return r;
}

std::string stories() { return "serve -m " + stories_dir() + "/stories260K.gguf -c 512 --port 0 -t 1 "; }

const json kBody = {{"prompt", "Once upon a time, there was a little girl named Lily. She loved to play outside"},
                    {"max_tokens", 40},
                    {"temperature", 0.8},
                    {"seed", 5},
                    {"logprobs", 2},
                    {"ignore_eos", true}};

TEST(ServeSelect, PerRequestSelectionThroughCompletionsAndChat) {
  PagodaProcess serve(stories());
  const int port = port_of(serve.line());
  ASSERT_GT(port, 0) << serve.err();
  const Reply full = post(port, "/v1/completions", kBody);
  ASSERT_EQ(full.code, 200) << full.body.dump();
  json big = kBody;
  big["kv_select"] = {{"method", "h2o"}, {"budget", 400}};
  const Reply same = post(port, "/v1/completions", big);
  ASSERT_EQ(same.code, 200) << same.body.dump();
  EXPECT_EQ(same.body["choices"][0]["text"], full.body["choices"][0]["text"]);
  EXPECT_EQ(same.body["choices"][0]["logprobs"].dump(), full.body["choices"][0]["logprobs"].dump()) << "bit for bit";
  big["kv_select"] = {{"method", "snapkv"}, {"budget", 400}, {"observe", 8}};
  const Reply snap = post(port, "/v1/completions", big);
  ASSERT_EQ(snap.code, 200) << snap.body.dump();
  EXPECT_EQ(snap.body["choices"][0]["logprobs"].dump(), full.body["choices"][0]["logprobs"].dump());

  json small = kBody;
  small["max_tokens"] = 120;
  small["n"] = 2;
  small["kv_select"] = {{"method", "h2o"}, {"budget", 32}, {"recent", 8}};
  for (int i = 0; i < 2; ++i) {  // the second is not served from the prefix cache either
    const Reply r = post(port, "/v1/completions", small);
    ASSERT_EQ(r.code, 200) << r.body.dump();
    EXPECT_EQ(r.body["usage"]["completion_tokens"], 240);
    EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << r.body;
  }
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                     {"max_tokens", 50},
                     {"kv_select", {{"method", "snapkv"}, {"budget", 16}}}};
  const Reply chatted = post(port, "/v1/chat/completions", chat);
  ASSERT_EQ(chatted.code, 200) << chatted.body.dump();

  const Reply explained = post(port, "/v1/kv/explain", small);
  ASSERT_EQ(explained.code, 200) << explained.body.dump();
  EXPECT_EQ(explained.body["cause"], "kv_select") << explained.body;

  for (const json& bad : {json{{"method", "lru"}, {"budget", 8}}, json{{"method", "h2o"}, {"budget", 8}, {"recent", 9}},
                          json{{"method", "h2o"}, {"budget", 0}}, json{{"method", "snapkv"}}, json{{"method", "h2o"}, {"budget", 100000}}}) {
    json body = kBody;
    body["kv_select"] = bad;
    const Reply r = post(port, "/v1/completions", body);
    EXPECT_EQ(r.code, 400) << bad.dump() << " -> " << r.body.dump();
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find("kv_select"), std::string::npos) << r.body;
    json c = chat;
    c["kv_select"] = bad;
    EXPECT_EQ(post(port, "/v1/chat/completions", c).code, 400) << bad.dump();
  }
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
}

TEST(ServeSelect, FlagIsTheDefaultAndWindowsRefuseIt) {
  {
    PagodaProcess serve(stories() + "--kv-select snapkv --kv-budget 24");
    const int port = port_of(serve.line());
    ASSERT_GT(port, 0) << serve.err();
    json body = kBody;
    body["max_tokens"] = 100;
    for (int i = 0; i < 2; ++i) {
      const Reply r = post(port, "/v1/completions", body);
      ASSERT_EQ(r.code, 200) << r.body.dump() << serve.err();
      EXPECT_EQ(r.body["usage"]["completion_tokens"], 100);
      EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << r.body;
    }
    body["kv_select"] = {{"method", "off"}};
    post(port, "/v1/completions", body);
    const Reply cached = post(port, "/v1/completions", body);
    ASSERT_EQ(cached.code, 200) << cached.body.dump();
    EXPECT_GT(cached.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << cached.body;
    EXPECT_EQ(serve.terminate(), 0) << serve.err();
  }
  PagodaProcess windowed(stories() + "--kv-window 64 --kv-sinks 16");
  const int port = port_of(windowed.line());
  ASSERT_GT(port, 0) << windowed.err();
  json body = kBody;
  body["kv_select"] = {{"method", "h2o"}, {"budget", 32}};
  const Reply r = post(port, "/v1/completions", body);
  EXPECT_EQ(r.code, 400) << r.body.dump();
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("window"), std::string::npos) << r.body;
  EXPECT_EQ(windowed.terminate(), 0) << windowed.err();
}

}  // namespace
}  // namespace pagoda::testing
