#include "store/redis_url.h"

#include <gtest/gtest.h>

namespace pagoda::store {
namespace {

TEST(RedisUrl, ParsesServersAndClusterSeeds) {
  bool cluster = true;
  auto ep = parse_redis_url("redis://127.0.0.1:7000", &cluster);
  ASSERT_TRUE(ep.is_ok()) << ep.status().message();
  EXPECT_FALSE(cluster);
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 7000);
  EXPECT_EQ(ep->address(), "127.0.0.1:7000");

  ep = parse_redis_url("redis+cluster://localhost", &cluster);
  ASSERT_TRUE(ep.is_ok());
  EXPECT_TRUE(cluster);
  EXPECT_EQ(ep->port, 6379);

  ep = parse_redis_url("redis://:s3cret@[::1]:6380/2", &cluster);
  ASSERT_TRUE(ep.is_ok()) << ep.status().message();
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->password, "s3cret");
  EXPECT_EQ(ep->db, 2);
}

TEST(RedisUrl, RejectsWhatIsNotAUrl) {
  bool cluster = false;
  for (const char* bad : {"http://h:1", "redis://", "redis://h:", "redis://h:0", "redis://h:65536", "redis://h:12x",
                          "redis://::1:6379", "redis://user:pw@h:1", "redis://:@h:1", "redis+cluster://h:1/3",
                          "redis://[::1", "redis://h:1/x"}) {
    auto ep = parse_redis_url(bad, &cluster);
    EXPECT_FALSE(ep.is_ok()) << bad;
    if (!ep.is_ok()) {
      EXPECT_NE(ep.status().message().find("--kv-remote"), std::string::npos) << ep.status().message();
    }
  }
}

TEST(RedisUrl, ListsAreOneForm) {
  auto t = parse_redis_urls({"redis://a:1", "redis://b:2"});
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->cluster);
  EXPECT_EQ(t->endpoints.size(), 2u);
  t = parse_redis_urls({"redis+cluster://a:1", "redis+cluster://b:2"});
  ASSERT_TRUE(t.is_ok());
  EXPECT_TRUE(t->cluster);
  EXPECT_FALSE(parse_redis_urls({}).is_ok());
  EXPECT_FALSE(parse_redis_urls({"redis://a:1", "redis+cluster://b:2"}).is_ok());
  EXPECT_FALSE(parse_redis_urls({"redis://a:1", "redis://a:1"}).is_ok());
}

TEST(RedisUrl, Compression) {
  EXPECT_EQ(*parse_redis_compression("none"), RedisCompression::kNone);
  EXPECT_EQ(*parse_redis_compression("lz4"), RedisCompression::kLz4);
  EXPECT_EQ(*parse_redis_compression("zstd"), RedisCompression::kZstd);
  EXPECT_FALSE(parse_redis_compression("gzip").is_ok());
  EXPECT_EQ(redis_compression_name(RedisCompression::kZstd), "zstd");
}

}  // namespace
}  // namespace pagoda::store
