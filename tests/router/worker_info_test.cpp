// What a worker says about itself, and worker addresses.
#include "router/worker_info.h"

#include <gtest/gtest.h>

#include "router/worker.h"

namespace pagoda::router {
namespace {

const char* kInfo = R"({"instance_id":"ab12","model":"stories260K","block_hash":"pagoda-xxh64-chain-v1",
  "block_size":16,"model_fingerprint":"6769604056e9b0d7","kv_format":"00000000000000ff","prefix_caching":true,
  "salt_per_api_key":true,"tokenizer_probe":[1,2,3],"future_field":{"x":1},
  "kv_events":{"enabled":true,"endpoint":"tcp://0.0.0.0:5557","replay_endpoint":"tcp://0.0.0.0:5558",
  "topic":"kv","last_seq":41,"encoding":"map"}})";

TEST(WorkerInfo, ParsesWhatServeAdvertises) {
  auto w = parse_worker_info(kInfo);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  EXPECT_EQ(w->instance_id, "ab12");
  EXPECT_EQ(w->block_hash, kBlockHashScheme);
  EXPECT_EQ(w->block_size, 16);
  EXPECT_EQ(w->model_fingerprint, 0x6769604056e9b0d7ull);
  EXPECT_EQ(w->kv_format, 0xffu);
  EXPECT_TRUE(w->salt_per_api_key);
  EXPECT_EQ(w->tokenizer_probe, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(w->events_enabled);
  EXPECT_EQ(w->replay_endpoint, "tcp://0.0.0.0:5558");
  EXPECT_EQ(w->last_seq, 41);
  const kvcache::KvNamespace ns = w->kv_namespace("tenant");
  EXPECT_EQ(ns.model_fingerprint, w->model_fingerprint);
  EXPECT_EQ(ns.cache_salt, kvcache::cache_salt_key("tenant"));
  EXPECT_EQ(w->kv_namespace("").cache_salt, 0u);
}

TEST(WorkerInfo, RejectsWhatItCannotFollow) {
  for (const char* bad : {"", "[]", R"({"block_size":0,"model_fingerprint":"1","kv_format":"1"})",
                          R"({"block_size":16,"model_fingerprint":"xyz","kv_format":"1"})",
                          R"({"block_size":16,"model_fingerprint":"1","kv_format":"1","kv_events":{"enabled":true}})"}) {
    EXPECT_FALSE(parse_worker_info(bad).is_ok()) << bad;
  }
}

TEST(WorkerInfo, FlagsOfAnotherTypeFallBackInsteadOfThrowing) {
  auto w = parse_worker_info(R"({"block_size":16,"model_fingerprint":"6769604056e9b0d7","kv_format":"00000000000000ff",
    "prefix_caching":"yes","salt_per_api_key":1,"kv_events":{"enabled":[true]}})");
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  EXPECT_TRUE(w->prefix_caching);
  EXPECT_FALSE(w->salt_per_api_key);
  EXPECT_FALSE(w->events_enabled);
}

TEST(WorkerInfo, WildcardEndpointsGetTheWorkersHost) {
  EXPECT_EQ(reachable_endpoint("tcp://0.0.0.0:5557", "10.0.0.7"), "tcp://10.0.0.7:5557");
  EXPECT_EQ(reachable_endpoint("tcp://*:5557", "worker-3"), "tcp://worker-3:5557");
  EXPECT_EQ(reachable_endpoint("tcp://[::]:5557", "h"), "tcp://h:5557");
  EXPECT_EQ(reachable_endpoint("tcp://127.0.0.1:5557", "h"), "tcp://127.0.0.1:5557");
  EXPECT_EQ(reachable_endpoint("ipc:///tmp/kv", "h"), "ipc:///tmp/kv");
}

TEST(WorkerInfo, WorkerUrls) {
  auto a = parse_worker_url("http://127.0.0.1:8081/");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8081);
  EXPECT_EQ(a->url, "http://127.0.0.1:8081");
  for (const char* bad : {"127.0.0.1:8081", "https://h:1", "http://h", "http://h:0", "http://h:99999", "http://h:80/v1",
                          "http://:80", "http://h:8x"}) {
    EXPECT_FALSE(parse_worker_url(bad).is_ok()) << bad;
  }
}

}  // namespace
}  // namespace pagoda::router
