// WorkerInfo: what a router learns from a worker's GET /v1/kv/events at start-up (and again on
// every health check): how the worker names its blocks, so the router hashes a request's
// blocks exactly as that worker will, and where it publishes their events.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kvcache/block_hash.h"

namespace pagoda::router {

struct WorkerInfo {
  std::string instance_id;          // changes when the worker restarts
  std::string model;                // its served name
  std::string block_hash;           // the hash scheme ("pagoda-xxh64-chain-v1")
  int64_t block_size = 0;
  uint64_t model_fingerprint = 0;   // KvNamespace fields
  uint64_t kv_format = 0;
  bool prefix_caching = true;
  bool salt_per_api_key = false;
  std::vector<int32_t> tokenizer_probe;  // its encode_prompt of model::kTokenizerProbe
  bool events_enabled = false;
  std::string events_endpoint;      // as the worker bound it (tcp://0.0.0.0:5557: host to fill in)
  std::string replay_endpoint;      // "" = none
  std::string topic;
  int64_t last_seq = -1;            // the last batch it published

  // The block hash function of the scheme it advertises (xxh64 when unknown: not followed then).
  kvcache::BlockHashFn hash_fn() const {
    const auto scheme = kvcache::block_hash_scheme_from_name(block_hash);
    return kvcache::block_hash_fn(scheme ? *scheme : kvcache::BlockHashScheme::kXxh64);
  }

  // The namespace of a request with this (tenant) cache salt.
  kvcache::KvNamespace kv_namespace(std::string_view cache_salt) const;
};

Result<WorkerInfo> parse_worker_info(std::string_view json_text);

// The default hash scheme; a worker advertising any scheme of kvcache::block_hash_scheme_from_name
// (xxh64 or sha256 chains) can be followed, others cannot.
inline constexpr std::string_view kBlockHashScheme = "pagoda-xxh64-chain-v1";

// A ZeroMQ endpoint as the worker bound it, made reachable from here: a wildcard host
// (tcp://*:P, tcp://0.0.0.0:P, tcp://[::]:P) becomes the worker's HTTP host.
std::string reachable_endpoint(const std::string& endpoint, const std::string& worker_host);

}  // namespace pagoda::router
