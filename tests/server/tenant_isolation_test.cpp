// Tenant isolation on the real engine (issue 12, point 4): with --salt-per-api-key, a tenant
// never gets a prefix-cache hit (cached_tokens > 0) on a prompt only another tenant sent, whatever
// cache_salt it sends; within a tenant, and between requests with the same cache_salt, the cache
// is shared. (The timing side of the same property is bench/tenant_ttft.py, a benchmark, not a timed test.)
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "real_server.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

class TenantIsolationTest : public RealServerTest {
 protected:
  void configure(server::ServerConfig& c) override {
    c.api_keys = {"sk-tenant-a", "sk-tenant-b", std::string("a\x1f") + "b"};
    c.salt_per_api_key = salt_per_key_;
  }
  int64_t cached(const std::string& key, const std::string& prompt, const std::string& salt = "") {
    json body = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
    if (!salt.empty()) body["cache_salt"] = salt;
    auto r = client_->Post("/v1/completions", {{"Authorization", "Bearer " + key}}, body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return -1;
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  bool salt_per_key_ = true;
};

// A prompt of several full blocks (the block size is 16 tokens), distinct per test case.
std::string long_prompt(const std::string& topic) {
  return "Once upon a time there was a little " + topic +
         " who lived in a big house with a red door and a garden full of flowers. Every day the " + topic +
         " played in the garden with a dog named Max, and they were very happy together.";
}

TEST_F(TenantIsolationTest, ATenantNeverHitsAnotherTenantsPrompt) {
  const std::string p = long_prompt("girl");
  EXPECT_EQ(cached("sk-tenant-a", p), 0);
  EXPECT_GT(cached("sk-tenant-a", p), 0) << "the tenant's own repeat hits its cache";
  EXPECT_EQ(cached("sk-tenant-b", p), 0);
  // Whatever salt B sends, including A's key or A's salt as the server spells it.
  for (const std::string& salt : {std::string("sk-tenant-a"), std::string("key:11:sk-tenant-a"),
                                  std::string("key:11:sk-tenant-a\x1f"), std::string("\x1f"), std::string("x")}) {
    EXPECT_EQ(cached("sk-tenant-b", p, salt), 0) << salt;
  }
  // A key that holds the separator cannot spell another tenant's salt.
  EXPECT_EQ(cached("sk-tenant-a", long_prompt("cat"), std::string("b\x1f")), 0);
  EXPECT_EQ(cached(std::string("a\x1f") + "b", long_prompt("cat")), 0);
  expect_idle_and_intact();
}

TEST_F(TenantIsolationTest, CacheSaltSeparatesRequestsOfOneTenant) {
  const std::string p = long_prompt("dog");
  EXPECT_EQ(cached("sk-tenant-a", p, "s1"), 0);
  EXPECT_GT(cached("sk-tenant-a", p, "s1"), 0);
  EXPECT_EQ(cached("sk-tenant-a", p, "s2"), 0);
  EXPECT_EQ(cached("sk-tenant-a", p), 0);
  expect_idle_and_intact();
}

class SharedCacheTest : public TenantIsolationTest {
 protected:
  SharedCacheTest() { salt_per_key_ = false; }
};

TEST_F(SharedCacheTest, WithoutSaltPerKeyTenantsShareUnlessTheySalt) {
  const std::string p = long_prompt("bird");
  EXPECT_EQ(cached("sk-tenant-a", p), 0);
  EXPECT_GT(cached("sk-tenant-b", p), 0);
  EXPECT_EQ(cached("sk-tenant-b", p, "private"), 0);
  EXPECT_GT(cached("sk-tenant-a", p, "private"), 0) << "the same salt is the same namespace";
  expect_idle_and_intact();
}

// --kv-hash sha256: blocks are named by SHA-256 chains, advertised to routers, and still hit.
class Sha256BlockNamesTest : public TenantIsolationTest {
 protected:
  void configure_engine(engine::EngineConfig& c) override { c.kv_hash = kvcache::BlockHashScheme::kSha256; }
};

TEST_F(Sha256BlockNamesTest, PrefixCacheWorksAndTheSchemeIsAdvertised) {
  auto info = client_->Get("/v1/kv/events", {{"Authorization", "Bearer sk-tenant-a"}});
  ASSERT_TRUE(info);
  ASSERT_EQ(info->status, 200) << info->body;
  EXPECT_EQ(json::parse(info->body)["block_hash"], "pagoda-sha256-chain-v1");
  const std::string p = long_prompt("fox");
  EXPECT_EQ(cached("sk-tenant-a", p), 0);
  EXPECT_GT(cached("sk-tenant-a", p), 0);
  EXPECT_EQ(cached("sk-tenant-b", p), 0);
  expect_idle_and_intact();
}

}  // namespace
}  // namespace pagoda::testing
