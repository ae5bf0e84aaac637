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
}

}  // namespace
}  // namespace pagoda::http
