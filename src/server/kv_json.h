// JSON bodies of the KV introspection API (server/kv_routes.cpp; fields documented in README.md
// "KV introspection"). Hashes are 16 hex digits; times are seconds.
//
//   GET  /v1/kv/stats          snapshot_json: pool (+ block_map), tiers, prefix_cache, requests,
//                              latency (count/sum/p50/p90/p99), tokens, finished, active
//                              requests, top_prefixes
//   GET  /v1/kv/requests/{id}  request_kv_json: the request and each sequence's block table
//   POST /v1/kv/explain        explain_json: hit tokens per tier, the cause of the break
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/introspection.h"

namespace pagoda::server {

std::string hash_hex(uint64_t hash);  // 16 lower-case hex digits

nlohmann::json snapshot_json(const engine::KvSnapshot& snapshot);
nlohmann::json request_kv_json(const engine::RequestKv& kv);
nlohmann::json explain_json(const engine::KvExplanation& explanation);

}  // namespace pagoda::server
