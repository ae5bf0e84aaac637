// /v1/cache/pin(s) over the real engine (stories260K) with a small pool: a pinned prefix keeps
// hitting while other prompts flood the pool, unpinning lets it go, ttl expiry follows the
// injected clock, limits and bad bodies get OpenAI error objects, API keys and per-key salts.
#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

std::string long_text(int repeats) {
  std::string t;
  for (int i = 0; i < repeats; ++i) {
    t += (i > 0 ? " " : "") + std::string("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.");
  }
  return t;  // no trailing space: a longer prompt starts with the same tokens
}

class PinServerTest : public RealServerTest {
 protected:
  void configure_engine(engine::EngineConfig& c) override { c.kv_cache_bytes = 1 << 20; }  // a few dozen blocks

  json get_json(const std::string& path, const httplib::Headers& headers = {}) {
    auto res = client_->Get(path.c_str(), headers);
    EXPECT_TRUE(res) << path;
    if (!res) return {};
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  }
  httplib::Result del(const std::string& path, const json& body, const httplib::Headers& headers = {}) {
    return client_->Delete(path.c_str(), headers, body.is_null() ? "" : body.dump(), "application/json");
  }
  int64_t cached_tokens(const std::string& prompt, const httplib::Headers& headers = {}) {
    auto res = client_->Post("/v1/completions", headers,
                             json{{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}}.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    if (!res || res->status != 200) return -1;
    return json::parse(res->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  // Distinct token prompts that together need `pools` times the pool.
  void flood(int64_t num_blocks, int64_t block_size, int pools) {
    const int64_t each = 6 * block_size;
    const int64_t n = pools * num_blocks / 6 + 1;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(each));
      p[0] = 1;
      for (size_t j = 1; j < p.size(); ++j) p[j] = static_cast<int32_t>(2 + (i * 53 + j * 11) % 500);
      auto res = post("/v1/completions", {{"prompt", p}, {"max_tokens", 1}});
      ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    }
  }
  double metric(const std::string& name) {
    auto res = client_->Get("/metrics");
    EXPECT_TRUE(res);
    const std::string text = res ? res->body : "";
    const size_t at = text.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name;
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
  }
};

TEST_F(PinServerTest, PinnedPrefixHitsThroughAFloodUntilUnpinned) {
  const std::string system = long_text(3);
  auto pinned = post("/v1/cache/pin", {{"prompt", system}, {"model", "stories260K"}});
  ASSERT_EQ(pinned->status, 200) << pinned->body;
  const json pin = json::parse(pinned->body);
  EXPECT_EQ(pin["object"], "cache.pin");
  EXPECT_EQ(pin["id"].get<std::string>().rfind("pin-", 0), 0u);
  const int64_t bs = pin["block_size"].get<int64_t>();
  const int64_t pinned_tokens = pin["pinned_tokens"].get<int64_t>();
  EXPECT_EQ(pinned_tokens, pin["prompt_tokens"].get<int64_t>() / bs * bs);
  EXPECT_GE(pin["num_blocks"].get<int64_t>(), 3);
  EXPECT_EQ(pin["blocks"].size(), pin["num_blocks"].get<size_t>());
  EXPECT_TRUE(pin["expires_at"].is_null());
  EXPECT_FALSE(pin["refreshed"].get<bool>());

  const json list = get_json("/v1/cache/pins");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], pin["id"]);
  EXPECT_EQ(list["pinned_blocks"], pin["num_blocks"]);
  const int64_t num_blocks = list["num_blocks"].get<int64_t>();
  EXPECT_EQ(list["max_pinned_blocks"].get<int64_t>(), num_blocks / 2);
  EXPECT_EQ(metric("pagoda_kv_pins"), 1);
  EXPECT_EQ(metric("pagoda_kv_pinned_blocks"), pin["num_blocks"].get<double>());
  const json stats = get_json("/v1/kv/stats");
  EXPECT_EQ(stats["pool"]["pins"], 1);
  EXPECT_EQ(stats["pool"]["pinned"], pin["num_blocks"]);  // cached and pinned: 'p' in the block map
  const std::string block_map = stats["pool"]["block_map"].get<std::string>();
  EXPECT_EQ(std::count(block_map.begin(), block_map.end(), 'p'), pin["num_blocks"].get<int64_t>());

  flood(num_blocks, bs, 3);
  EXPECT_GT(metric("pagoda_kv_evicted_blocks_total"), static_cast<double>(num_blocks));
  EXPECT_EQ(cached_tokens(system + " What did Lily see?"), pinned_tokens);

  auto removed = del("/v1/cache/pin", {{"id", pin["id"]}});
  ASSERT_EQ(removed->status, 200) << removed->body;
  EXPECT_TRUE(json::parse(removed->body)["deleted"].get<bool>());
  EXPECT_TRUE(get_json("/v1/cache/pins")["data"].empty());
  auto again = del("/v1/cache/pins/" + pin["id"].get<std::string>(), nullptr);
  EXPECT_EQ(again->status, 404);
  EXPECT_EQ(json::parse(again->body)["error"]["code"], "pin_not_found");
  flood(num_blocks, bs, 3);
  EXPECT_EQ(cached_tokens(system + " What did Lily see?"), 0);  // gone once unpinned
  expect_idle_and_intact();
}

TEST_F(PinServerTest, TtlExpiresByTheClockAndChatPinsUnpinByTheirBody) {
  const json body = {{"messages", {{{"role", "system"}, {"content", long_text(2)}}}}, {"ttl_seconds", 30}};
  auto pinned = post("/v1/cache/pin", body);
  ASSERT_EQ(pinned->status, 200) << pinned->body;
  const json pin = json::parse(pinned->body);
  EXPECT_EQ(pin["ttl_seconds"], 30.0);
  EXPECT_EQ(pin["expires_at"], 1700000000 + 30);
  EXPECT_LE(pin["expires_in_s"].get<double>(), 30.0);
  EXPECT_GT(pin["expires_in_s"].get<double>(), 20.0);
  // The same body again: refreshed, same id.
  auto refreshed = post("/v1/cache/pin", body);
  ASSERT_EQ(refreshed->status, 200) << refreshed->body;
  EXPECT_EQ(json::parse(refreshed->body)["id"], pin["id"]);
  EXPECT_TRUE(json::parse(refreshed->body)["refreshed"].get<bool>());
  clock_.advance_ns(31'000'000'000);
  EXPECT_TRUE(get_json("/v1/cache/pins")["data"].empty());
  EXPECT_EQ(metric("pagoda_kv_pins_expired_total"), 1);
  EXPECT_EQ(metric("pagoda_kv_pinned_blocks"), 0);

  ASSERT_EQ(post("/v1/cache/pin", body)->status, 200);
  auto removed = del("/v1/cache/pin", body);  // by the same body
  ASSERT_EQ(removed->status, 200) << removed->body;
  EXPECT_EQ(json::parse(removed->body)["object"], "cache.pin");
  EXPECT_EQ(del("/v1/cache/pin", body)->status, 404);
  expect_idle_and_intact();
}

TEST_F(PinServerTest, LimitsAndBadBodiesGetClearErrors) {
  auto status_of = [&](const json& b) {
    auto r = post("/v1/cache/pin", b);
    return r ? r->status : -1;
  };
  EXPECT_EQ(client_->Post("/v1/cache/pin", "not json", "application/json")->status, 400);
  EXPECT_EQ(status_of(json::array({1, 2})), 400);
  EXPECT_EQ(status_of({{"ttl_seconds", 10}}), 400);  // no prompt
  auto bad_ttl = post("/v1/cache/pin", {{"prompt", long_text(1)}, {"ttl_seconds", "soon"}});
  EXPECT_EQ(bad_ttl->status, 400);
  EXPECT_EQ(json::parse(bad_ttl->body)["error"]["param"], "ttl_seconds");
  EXPECT_EQ(status_of({{"prompt", long_text(1)}, {"ttl_seconds", -5}}), 400);
  EXPECT_EQ(status_of({{"prompt", long_text(1)}, {"ttl_seconds", 1e12}}), 400);
  EXPECT_EQ(status_of({{"prompt", long_text(1)}, {"model", "gpt-4"}}), 404);
  EXPECT_EQ(status_of({{"prompt", {long_text(1), long_text(1)}}}), 400);  // one prompt
  auto short_prompt = post("/v1/cache/pin", {{"prompt", "Hi"}});
  EXPECT_EQ(short_prompt->status, 400);
  EXPECT_NE(json::parse(short_prompt->body)["error"]["message"].get<std::string>().find("full KV blocks"), std::string::npos);
  EXPECT_EQ(status_of({{"prompt", std::vector<int32_t>(600, 5)}}), 413);  // past the context
  EXPECT_EQ(status_of({{"prompt", std::vector<int32_t>{1, 99999, 3}}}), 400);

  // The pinned share (half the pool): a prompt of more blocks than that is refused with 507.
  const json list = get_json("/v1/cache/pins");
  const int64_t max_blocks = list["max_pinned_blocks"].get<int64_t>();
  const int64_t bs = list["block_size"].get<int64_t>();
  ASSERT_LT((max_blocks + 1) * bs, kContext) << "the test needs a pool whose half is shorter than the context";
  std::vector<int32_t> big(static_cast<size_t>((max_blocks + 1) * bs), 7);
  big[0] = 1;
  auto over = post("/v1/cache/pin", {{"prompt", big}});
  ASSERT_EQ(over->status, 507) << over->body;
  const json err = json::parse(over->body)["error"];
  EXPECT_EQ(err["code"], "pin_limit_exceeded");
  EXPECT_EQ(err["type"], "insufficient_storage");
  EXPECT_NE(err["message"].get<std::string>().find("--max-pinned-share"), std::string::npos);
  // Filling the share with two pins refuses a third that would go past it.
  std::vector<int32_t> half(static_cast<size_t>(max_blocks / 2 * bs), 8), other = half, third = half;
  half[0] = other[0] = third[0] = 1;
  other[1] = 9;
  third[1] = 10;
  ASSERT_EQ(post("/v1/cache/pin", {{"prompt", half}})->status, 200);
  ASSERT_EQ(post("/v1/cache/pin", {{"prompt", other}})->status, 200);
  EXPECT_EQ(post("/v1/cache/pin", {{"prompt", third}})->status, 507);
  EXPECT_EQ(get_json("/v1/cache/pins")["data"].size(), 2u);

  EXPECT_EQ(del("/v1/cache/pin", {{"id", "pin-999"}})->status, 404);
  EXPECT_EQ(del("/v1/cache/pin", {{"id", "nine"}})->status, 400);
  EXPECT_EQ(del("/v1/cache/pins/xyz", nullptr)->status, 404);
  EXPECT_EQ(client_->Delete("/v1/cache/pin", "[}", "application/json")->status, 400);
  const json pins = get_json("/v1/cache/pins");  // the range below must not be a temporary's member
  for (const json& p : pins["data"]) {
    EXPECT_EQ(del("/v1/cache/pins/" + p["id"].get<std::string>(), nullptr)->status, 200);
  }
  expect_idle_and_intact();
}

class PinKeyedServerTest : public PinServerTest {
 protected:
  void configure(server::ServerConfig& c) override {
    c.api_keys = {"k1", "k2"};
    c.salt_per_api_key = true;
  }
};

TEST_F(PinKeyedServerTest, PinsNeedTheKeyAndBelongToTheirTenant) {
  const httplib::Headers k1 = {{"Authorization", "Bearer k1"}}, k2 = {{"Authorization", "Bearer k2"}};
  const std::string system = long_text(2);
  EXPECT_EQ(post("/v1/cache/pin", {{"prompt", system}})->status, 401);
  EXPECT_EQ(client_->Get("/v1/cache/pins")->status, 401);
  EXPECT_EQ(del("/v1/cache/pin", {{"id", "pin-1"}})->status, 401);
  auto pinned = client_->Post("/v1/cache/pin", k1, json{{"prompt", system}, {"cache_salt", "team"}}.dump(), "application/json");
  ASSERT_EQ(pinned->status, 200) << pinned->body;
  const json pin = json::parse(pinned->body);
  EXPECT_EQ(pin["cache_salt"], "team");  // as sent: the key never shows
  EXPECT_EQ(get_json("/v1/cache/pins", k1)["data"].size(), 1u);
  EXPECT_TRUE(get_json("/v1/cache/pins", k2)["data"].empty());  // another tenant's pin
  EXPECT_EQ(del("/v1/cache/pins/" + pin["id"].get<std::string>(), nullptr, k2)->status, 404);
  // k1's requests with the same salt hit it; k2's never share k1's blocks.
  auto ask = [&](const httplib::Headers& h) {
    auto res = client_->Post("/v1/completions", h,
                             json{{"prompt", system + " The end."}, {"max_tokens", 1}, {"cache_salt", "team"}}.dump(),
                             "application/json");
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  EXPECT_EQ(ask(k1), pin["pinned_tokens"].get<int64_t>());
  EXPECT_EQ(ask(k2), 0);
  EXPECT_EQ(del("/v1/cache/pins/" + pin["id"].get<std::string>(), nullptr, k1)->status, 200);
  expect_idle_and_intact();
}

}  // namespace
}  // namespace pagoda::testing
