// --kv-events-config: vLLM's keys and defaults, our one extra key, and clear errors.
#include "events/kv_events_config.h"

#include <gtest/gtest.h>

namespace pagoda::events {
namespace {

TEST(KvEventsConfig, VllmDefaults) {
  auto c = parse_kv_events_config("{}");
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(c->enable_kv_cache_events);
  EXPECT_EQ(c->publisher, "null");
  EXPECT_FALSE(c->publishes());
  EXPECT_EQ(c->endpoint, "tcp://*:5557");
  EXPECT_EQ(c->replay_endpoint, "");
  EXPECT_EQ(c->buffer_steps, 10000);
  EXPECT_EQ(c->hwm, 100000);
  EXPECT_EQ(c->max_queue_size, 100000);
  EXPECT_EQ(c->topic, "");
  EXPECT_EQ(c->encoding, EventEncoding::kMap);
}

TEST(KvEventsConfig, TheTypicalVllmLine) {
  auto c = parse_kv_events_config(
      R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",)"
      R"("replay_endpoint":"tcp://*:5558","topic":"kv-events"})");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(c->publishes());
  EXPECT_EQ(c->replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(c->topic, "kv-events");
  // Enabled without a publisher: zmq, as vLLM resolves it; "null" turns events off.
  EXPECT_TRUE(parse_kv_events_config(R"({"enable_kv_cache_events":true})")->publishes());
  EXPECT_FALSE(parse_kv_events_config(R"({"enable_kv_cache_events":true,"publisher":"null"})")->publishes());
  EXPECT_EQ(parse_kv_events_config(R"({"replay_endpoint":null,"encoding":"array"})")->encoding, EventEncoding::kArray);
}

TEST(KvEventsConfig, ErrorsNameTheKey) {
  auto expect_error = [](const char* json, const char* needle) {
    auto c = parse_kv_events_config(json);
    ASSERT_FALSE(c.is_ok()) << json;
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  };
  expect_error("{", "not valid JSON");
  expect_error("[]", "JSON object");
  expect_error(R"({"enable_kv_cache_event":true})", "enable_kv_cache_event");
  expect_error(R"({"enable_kv_cache_events":"yes"})", "enable_kv_cache_events");
  expect_error(R"({"publisher":"kafka"})", "publisher");
  expect_error(R"({"endpoint":"localhost:5557"})", "endpoint");
  expect_error(R"({"replay_endpoint":"x"})", "replay_endpoint");
  expect_error(R"({"buffer_steps":0})", "buffer_steps");
  expect_error(R"({"hwm":-1})", "hwm");
  expect_error(R"({"max_queue_size":1.5})", "max_queue_size");
  expect_error(R"({"topic":5})", "topic");
  expect_error(R"({"encoding":"json"})", "encoding");
}

TEST(KvEventsConfig, BindStableConnectVolatile) {
  EXPECT_TRUE(endpoint_binds("tcp://*:5557"));
  EXPECT_TRUE(endpoint_binds("tcp://[::]:5557"));
  EXPECT_TRUE(endpoint_binds("ipc:///tmp/kv"));
  EXPECT_TRUE(endpoint_binds("inproc://kv"));
  EXPECT_TRUE(endpoint_binds("tcp://127.0.0.1:*"));
  EXPECT_FALSE(endpoint_binds("tcp://indexer:5557"));
  EXPECT_FALSE(endpoint_binds("tcp://127.0.0.1:5557"));
}

TEST(KvEventsConfig, DataParallelRanksGetTheirOwnEndpoints) {
  EXPECT_EQ(offset_endpoint("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(offset_endpoint("tcp://*:5557", 2), "tcp://*:5559");
  EXPECT_EQ(offset_endpoint("inproc://kv", 1), "inproc://kv_dp1");
  EXPECT_EQ(offset_endpoint("tcp://127.0.0.1:*", 1), "tcp://127.0.0.1:*");
}

}  // namespace
}  // namespace pagoda::events
