#include "store/cluster_slots.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>

namespace pagoda::store {
namespace {

TEST(ClusterSlots, Crc16AndKeySlotsMatchTheSpecification) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);  // the check value of CRC-16/XMODEM
  EXPECT_EQ(key_slot("foo"), 12182);             // redis-cli CLUSTER KEYSLOT foo
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot(""), 0);
  // Hash tags: only the first non-empty {...} counts.
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16_xmodem("foo{}{bar}") & 16383);  // empty tag: the whole key
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
}

TEST(ClusterSlots, ParsesRedirects) {
  auto r = parse_redirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(r->slot, 3999);
  EXPECT_EQ(r->host, "127.0.0.1");
  EXPECT_EQ(r->port, 6381);
  r = parse_redirect("ASK 16383 [::1]:7000");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(r->host, "::1");
  for (const char* no : {"ERR unknown command", "MOVED", "MOVED 16384 h:1", "MOVED x h:1", "ASK 1 h", "ASK 1 h:0",
                         "MOVED 1 :5", "OOM command not allowed"}) {
    EXPECT_FALSE(parse_redirect(no).has_value()) << no;
  }
}

// A reply parsed by hiredis from RESP bytes, as a server would send it.
std::unique_ptr<redisReply, void (*)(void*)> parse_resp(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  return {static_cast<redisReply*>(reply), freeReplyObject};
}

TEST(ClusterSlots, ParsesClusterSlotsReplies) {
  // Two ranges; the second master has an empty host (a node that does not know its address)
  // and a replica; Redis 7 appends a metadata map, here as an empty array.
  const std::string resp =
      "*2\r\n"
      "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
      "*4\r\n:8192\r\n:16383\r\n*4\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n*0\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n$2\r\nid\r\n";
  auto reply = parse_resp(resp);
  ASSERT_NE(reply, nullptr);
  auto ranges = parse_cluster_slots(reply.get(), "10.0.0.9");
  ASSERT_TRUE(ranges.is_ok()) << ranges.status().message();
  ASSERT_EQ(ranges->size(), 2u);
  EXPECT_EQ((*ranges)[1].host, "10.0.0.9");
  EXPECT_EQ((*ranges)[1].port, 7001);

  SlotMap map;
  map.assign(*ranges);
  EXPECT_EQ(map.num_assigned(), kClusterSlots);
  EXPECT_EQ(map.nodes()[map.node_of(0)].port, 7000);
  EXPECT_EQ(map.nodes()[map.node_of(16383)].port, 7001);
  map.set(5, "127.0.0.1", 7002);  // MOVED
  EXPECT_EQ(map.nodes()[map.node_of(5)].port, 7002);
  EXPECT_EQ(map.masters().size(), 3u);
  const int before = static_cast<int>(map.nodes().size());
  map.assign(*ranges);  // a refresh keeps node indices
  EXPECT_EQ(static_cast<int>(map.nodes().size()), before);
  EXPECT_EQ(map.masters().size(), 2u);

  for (const char* bad : {"+OK\r\n", "*1\r\n*2\r\n:0\r\n:1\r\n", "*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n",
                          "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n", "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n"}) {
    auto r = parse_resp(bad);
    EXPECT_FALSE(parse_cluster_slots(r.get(), "h").is_ok()) << bad;
  }
}

}  // namespace
}  // namespace pagoda::store
