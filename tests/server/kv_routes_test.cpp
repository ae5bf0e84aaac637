// /v1/kv/stats, /v1/kv/requests/{id}, /v1/kv/explain and the dashboard's assets over HTTP, on
// the real engine (stories260K) in-process.
#include <sys/socket.h>

#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

json get_json(httplib::Client& c, const std::string& path, int want_status = 200) {
  auto res = c.Get(path.c_str());
  EXPECT_TRUE(res) << path;
  if (!res) return json();
  EXPECT_EQ(res->status, want_status) << path << ": " << res->body;
  return json::parse(res->body);
}

double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name;
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

TEST_F(RealServerTest, StatsAgreeWithMetricsAndExplainPredictsTheHit) {
  const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
  auto explain = [&](const json& body) {
    auto res = post("/v1/kv/explain", body);
    EXPECT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  };
  const json cold = explain({{"prompt", prompt}});
  EXPECT_EQ(cold["cause"], "never_seen") << cold;
  EXPECT_EQ(cold["hit_tokens"], 0);
  EXPECT_EQ(cold["model"], "stories260K");

  auto first = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_FALSE(first->get_header_value("X-Pagoda-Request-Id").empty());
  const json warm = explain({{"prompt", prompt}, {"max_tokens", 8}});  // generation fields are ignored
  EXPECT_EQ(warm["cause"], "full_hit") << warm;
  EXPECT_GT(warm["hit_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(warm["tiers"][0]["tier"], "pool");
  auto second = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(second->status, 200);
  EXPECT_EQ(json::parse(second->body)["usage"]["prompt_tokens_details"]["cached_tokens"], warm["hit_tokens"]);

  const json salted = explain({{"prompt", prompt}, {"cache_salt", "tenant-7"}});
  EXPECT_EQ(salted["cause"], "salt_differs") << salted;
  EXPECT_EQ(salted["other_namespace_hit_tokens"], warm["hit_tokens"]);
  const json chat = explain({{"messages", {{{"role", "user"}, {"content", prompt}}}}});
  EXPECT_EQ(chat["object"], "kv.explain");
  EXPECT_GT(chat["prompt_tokens"].get<int64_t>(), cold["prompt_tokens"].get<int64_t>());  // the template's markers

  const json stats = get_json(*client_, "/v1/kv/stats");
  const std::string metrics = client_->Get("/metrics")->body;
  EXPECT_EQ(stats["object"], "kv.stats");
  EXPECT_EQ(stats["served_model"], "stories260K");
  EXPECT_EQ(stats["prefix_cache"]["hit_tokens"].get<double>(), metric(metrics, "pagoda_prefix_cache_hit_tokens_total"));
  EXPECT_EQ(stats["prefix_cache"]["queried_tokens"].get<double>(), metric(metrics, "pagoda_prefix_cache_queried_tokens_total"));
  EXPECT_EQ(stats["pool"]["cached"].get<double>(), metric(metrics, "pagoda_kv_blocks{state=\"cached\"}"));
  EXPECT_EQ(stats["pool"]["num_blocks"].get<double>(), metric(metrics, "pagoda_kv_blocks_capacity"));
  EXPECT_EQ(stats["latency"]["ttft"]["count"].get<double>(), metric(metrics, "pagoda_time_to_first_token_seconds_count"));
  EXPECT_EQ(stats["steps"].get<double>(), metric(metrics, "pagoda_engine_steps_total"));
  EXPECT_EQ(stats["pool"]["block_map"].get<std::string>().size(), stats["pool"]["num_blocks"].get<size_t>());
  // The pool is named as what it is (host memory on this CPU engine); "GPU" stays the events' medium.
  EXPECT_EQ(stats["tiers"][0]["tier"], "pool");
  EXPECT_EQ(stats["tiers"][0]["memory"], "host DRAM");
  EXPECT_EQ(stats["tiers"][0]["medium"], "GPU");
  ASSERT_FALSE(stats["top_prefixes"].empty());
  EXPECT_EQ(stats["top_prefixes"][0]["preview"].get<std::string>().rfind("Once upon a time", 0), 0u) << stats["top_prefixes"];
  const json lean = get_json(*client_, "/v1/kv/stats?block_map=0&requests=0&prefixes=1");
  EXPECT_FALSE(lean["pool"].contains("block_map"));
  EXPECT_EQ(lean["top_prefixes"].size(), 1u);
  get_json(*client_, "/v1/kv/stats?prefixes=lots", 400);
  expect_idle_and_intact();
}

TEST_F(RealServerTest, ExplainRejectsBadRequests) {
  auto status = [&](const std::string& body) {
    return client_->Post("/v1/kv/explain", body, "application/json")->status;
  };
  EXPECT_EQ(status("{not json"), 400);
  EXPECT_EQ(status("[1, 2]"), 400);
  EXPECT_EQ(status(R"({"max_tokens": 3})"), 400);
  EXPECT_EQ(status(R"({"prompt": ["a", "b"]})"), 400);
  EXPECT_EQ(status(R"({"prompt": [1, 99999999]})"), 400);
  EXPECT_EQ(status(R"({"prompt": "hi", "model": "gpt-9"})"), 404);
  EXPECT_EQ(status(R"({"messages": []})"), 400);
  EXPECT_EQ(status(R"({"prompt": [1, 2, 3]})"), 200);  // token ids are fine
}

TEST_F(RealServerTest, ARunningRequestsBlockTable) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}};
  const int fd = send_raw(port_, post_request("/v1/completions", body.dump()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  const size_t at = got.find("X-Pagoda-Request-Id: ");
  ASSERT_NE(at, std::string::npos) << got;
  const std::string id = got.substr(at + 21, got.find('\r', at) - at - 21);
  const json kv = get_json(*client_, "/v1/kv/requests/" + id);
  EXPECT_EQ(kv["object"], "kv.request");
  EXPECT_EQ(kv["state"], "decoding") << kv;
  ASSERT_EQ(kv["sequences"].size(), 1u);
  const json& blocks = kv["sequences"][0]["blocks"];
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(blocks[0]["state"], "in use");
  EXPECT_EQ(blocks[0]["ref_count"], 1);
  EXPECT_EQ(blocks[0]["tier"], "pool");
  EXPECT_EQ(kv["blocks_held"].get<size_t>(), blocks.size());
  const json stats = get_json(*client_, "/v1/kv/stats");
  ASSERT_EQ(stats["active"].size(), 1u);
  EXPECT_EQ(std::to_string(stats["active"][0]["id"].get<int64_t>()), id);
  close(fd);  // the client goes away: the request is aborted
  get_json(*client_, "/v1/kv/requests/999999", 404);
  for (int i = 0; i < 200 && serving_->metrics().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  expect_idle_and_intact();
}

// A request with kv_select (H2O): its dump names the selection and says it is not prefix-cached.
TEST_F(RealServerTest, ASelectingRequestsDumpSaysItIsNotPrefixCached) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true},
                     {"kv_select", {{"method", "h2o"}, {"budget", 24}, {"recent", 8}}}};
  const int fd = send_raw(port_, post_request("/v1/completions", body.dump()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  const size_t at = got.find("X-Pagoda-Request-Id: ");
  ASSERT_NE(at, std::string::npos) << got;
  const std::string id = got.substr(at + 21, got.find('\r', at) - at - 21);
  const json kv = get_json(*client_, "/v1/kv/requests/" + id);
  ASSERT_EQ(kv["sequences"].size(), 1u) << kv;
  const json& seq = kv["sequences"][0];
  EXPECT_EQ(seq["kv_select"], "h2o budget 24 recent 8; not prefix-cached") << seq;
  EXPECT_LE(seq["length"].get<int64_t>(), 24);
  EXPECT_LE(seq["blocks"].size(), 2u);  // 24 tokens in blocks of 16
  close(fd);
  for (int i = 0; i < 200 && serving_->metrics().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  expect_idle_and_intact();
}

TEST_F(RealServerTest, DashboardAssetsAreCompiledInWithAStrictPolicy) {
  auto page = client_->Get("/dashboard");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_NE(page->body.find("/dashboard/dashboard.js"), std::string::npos);
  EXPECT_EQ(page->body.find("http"), std::string::npos) << "no absolute URL (no CDN) in the page";
  auto js = client_->Get("/dashboard/dashboard.js");
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_NE(js->body.find("/v1/kv/stats"), std::string::npos);
  EXPECT_EQ(client_->Get("/dashboard/dashboard.css")->status, 200);
  EXPECT_EQ(client_->Get("/dashboard/other.js")->status, 404);
}

TEST_F(RealServerTest, PagodaExplainPrintsTheCause) {
  const std::string explain = std::string(PAGODA_BIN_DIR) + "/pagoda explain --url " + url_ + " ";
  const std::string prompt = "'Once upon a time, there was a little girl named Lily. She loved to play.'";
  const ShellRun cold = run_shell(explain + "-m stories260K " + prompt + " 2>&1");
  EXPECT_EQ(cold.exit_code, 0) << cold.out;
  EXPECT_NE(cold.out.find("cause:   never_seen"), std::string::npos) << cold.out;
  ASSERT_EQ(post("/v1/completions", {{"prompt", "Once upon a time, there was a little girl named Lily. She loved to play."},
                                     {"max_tokens", 2}})->status, 200);
  const ShellRun warm = run_shell(explain + prompt + " 2>&1");
  EXPECT_NE(warm.out.find("cause:   full_hit"), std::string::npos) << warm.out;
  EXPECT_NE(warm.out.find("from pool"), std::string::npos) << warm.out;
  const ShellRun as_json = run_shell(explain + "--json --cache-salt other " + prompt);
  EXPECT_EQ(json::parse(as_json.out)["cause"], "salt_differs") << as_json.out;
  const ShellRun wrong = run_shell(explain + "-m gpt-9 hello 2>&1");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.out.find("HTTP 404"), std::string::npos) << wrong.out;
}

// Llama 3's template trims every message, so a reply the model wrote with spaces around it is
// rendered differently when the conversation comes back: the cached turn no longer matches.
class Llama3ServerTest : public RealServerTest {
 protected:
  server::ChatFamily chat_family() const override { return server::ChatFamily::kLlama3; }
};

TEST_F(Llama3ServerTest, ExplainNamesATemplateThatRewritesAnEarlierReply) {
  const std::string user = "Once upon a time, there was a little girl named Lily. She loved to play.";
  const std::string reply = "  She ran to the park with her big red ball.  ";
  // What the cache holds after the first turn: its prompt (rendered to ask for a reply) + the reply.
  const server::ChatTemplate llama3(server::ChatFamily::kLlama3, "<s>", "</s>");
  const std::string asked = *llama3.render({{"user", user}}, true);
  std::vector<int32_t> cached = tokenizer_->encode(asked, /*add_bos=*/false, true);  // the template writes <s>
  const size_t asked_tokens = cached.size();
  const std::vector<int32_t> reply_ids = tokenizer_->encode(reply, false, true);
  cached.insert(cached.end(), reply_ids.begin(), reply_ids.end());
  ASSERT_EQ(post("/v1/completions", {{"prompt", cached}, {"max_tokens", 1}})->status, 200);
  const json messages = {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", reply}},
                         {{"role", "user"}, {"content", "What happened next?"}}};
  auto res = post("/v1/kv/explain", {{"messages", messages}});
  ASSERT_EQ(res->status, 200) << res->body;
  const json e = json::parse(res->body);
  EXPECT_EQ(e["cause"], "template_rewrite") << e;
  EXPECT_GE(e["diverge_token"].get<size_t>(), asked_tokens - 1) << e;  // at the trimmed reply
  EXPECT_LE(e["diverge_token"].get<size_t>(), asked_tokens + 1) << e;
  EXPECT_GT(e["hit_tokens"].get<int64_t>(), 0) << e;  // the first turn's prompt still hits
  // The same conversation with a reply the template keeps as it is: no rewrite to report.
  const json kept = {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", "She ran."}},
                     {{"role", "user"}, {"content", "What happened next?"}}};
  const json e2 = json::parse(post("/v1/kv/explain", {{"messages", kept}})->body);
  EXPECT_NE(e2["cause"], "template_rewrite") << e2;
}

class KeyedKvTest : public RealServerTest {
 protected:
  void configure(server::ServerConfig& c) override { c.api_keys = {"sk-1"}; }
};

TEST_F(KeyedKvTest, TheKvApiNeedsTheKey) {
  EXPECT_EQ(client_->Get("/v1/kv/stats")->status, 401);
  EXPECT_EQ(client_->Get("/v1/kv/requests/1")->status, 401);
  EXPECT_EQ(post("/v1/kv/explain", {{"prompt", "hi"}})->status, 401);
  httplib::Headers auth = {{"Authorization", "Bearer sk-1"}};
  EXPECT_EQ(client_->Get("/v1/kv/stats", auth)->status, 200);
  EXPECT_EQ(client_->Get("/dashboard")->status, 200);
}

}  // namespace
}  // namespace pagoda::testing
