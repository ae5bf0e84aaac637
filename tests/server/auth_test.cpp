// The key a request presents and the tenant salt its blocks are hashed with (server/http/auth.h).
#include "server/http/auth.h"

#include <gtest/gtest.h>

namespace pagoda::http {
namespace {

TEST(HttpAuth, BearerToken) {
  EXPECT_EQ(bearer_token("Bearer sk-1"), "sk-1");
  EXPECT_EQ(bearer_token("Bearer "), "");
  EXPECT_EQ(bearer_token("bearer sk-1"), "");
  EXPECT_EQ(bearer_token("Basic abc"), "");
  EXPECT_EQ(bearer_token(""), "");
}

TEST(HttpAuth, TenantSaltSeparatesKeysOnlyWhenAsked) {
  EXPECT_EQ(tenant_cache_salt(false, "sk-a", "s"), "s");
  EXPECT_EQ(tenant_cache_salt(false, "sk-a", ""), "");
  EXPECT_NE(tenant_cache_salt(true, "sk-a", "s"), tenant_cache_salt(true, "sk-b", "s"));
  EXPECT_NE(tenant_cache_salt(true, "sk-a", ""), "");
  // A key holding the separator cannot spell another tenant's salt.
  EXPECT_NE(tenant_cache_salt(true, "a\x1f" "b", ""), tenant_cache_salt(true, "a", "b\x1f"));
  EXPECT_NE(tenant_cache_salt(true, "a", "b"), tenant_cache_salt(true, "", "a\x1f" "b"));
}

TEST(HttpAuth, ApiKeysMatchExactly) {
  const std::vector<std::string> keys = {"sk-alpha", "sk-beta-long"};
  EXPECT_TRUE(api_key_matches("sk-alpha", keys));
  EXPECT_TRUE(api_key_matches("sk-beta-long", keys));
  EXPECT_FALSE(api_key_matches("sk-alph", keys));
  EXPECT_FALSE(api_key_matches("sk-alphaa", keys));
  EXPECT_FALSE(api_key_matches("sk-beta-lonG", keys));
  EXPECT_FALSE(api_key_matches("", keys));
  EXPECT_FALSE(api_key_matches("", {""}));
  EXPECT_FALSE(api_key_matches("sk-alpha", {}));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("a", ""));
  EXPECT_FALSE(constant_time_equal(std::string_view("a\0", 2), "a"));
  EXPECT_TRUE(constant_time_equal("\xff\x01", "\xff\x01"));
}

}  // namespace
}  // namespace pagoda::http
