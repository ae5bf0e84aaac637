#include "router/worker_info.h"

#include <nlohmann/json.hpp>

#include "events/block_index.h"

namespace pagoda::router {

using nlohmann::json;

namespace {

bool parse_hex64(const json& j, uint64_t& out) {
  return j.is_string() && events::hash_from_hex(j.get<std::string>(), out);
}

std::string text_or(const json& j, const char* key, std::string fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// The boolean at `key`, or `fallback` when it is missing or not a boolean (a worker never crashes the router).
bool flag_or(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

kvcache::KvNamespace WorkerInfo::kv_namespace(std::string_view cache_salt) const {
  kvcache::KvNamespace ns;
  ns.model_fingerprint = model_fingerprint;
  ns.kv_format = kv_format;
  ns.cache_salt = kvcache::cache_salt_key(cache_salt);
  return ns;
}

Result<WorkerInfo> parse_worker_info(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("/v1/kv/events: not a JSON object");
  WorkerInfo w;
  w.instance_id = text_or(j, "instance_id");
  w.model = text_or(j, "model");
  w.block_hash = text_or(j, "block_hash");
  auto bs = j.find("block_size");
  if (bs == j.end() || !bs->is_number_integer() || bs->get<int64_t>() <= 0) {
    return Status::invalid_argument("/v1/kv/events: no positive block_size");
  }
  w.block_size = bs->get<int64_t>();
  if (!parse_hex64(j.value("model_fingerprint", json()), w.model_fingerprint) ||
      !parse_hex64(j.value("kv_format", json()), w.kv_format)) {
    return Status::invalid_argument("/v1/kv/events: model_fingerprint and kv_format must be 16 hex digits");
  }
  w.prefix_caching = flag_or(j, "prefix_caching", true);
  w.salt_per_api_key = flag_or(j, "salt_per_api_key", false);
  if (auto probe = j.find("tokenizer_probe"); probe != j.end() && probe->is_array()) {
    for (const json& id : *probe) {
      if (!id.is_number_integer()) return Status::invalid_argument("/v1/kv/events: tokenizer_probe holds a non-integer");
      w.tokenizer_probe.push_back(id.get<int32_t>());
    }
  }
  auto events = j.find("kv_events");
  if (events != j.end() && events->is_object()) {
    w.events_enabled = flag_or(*events, "enabled", false);
    w.events_endpoint = text_or(*events, "endpoint");
    w.replay_endpoint = text_or(*events, "replay_endpoint");
    w.topic = text_or(*events, "topic");
    if (auto seq = events->find("last_seq"); seq != events->end() && seq->is_number_integer()) {
      w.last_seq = seq->get<int64_t>();
    }
    if (w.events_enabled && w.events_endpoint.empty()) {
      return Status::invalid_argument("/v1/kv/events: events enabled without an endpoint");
    }
  }
  return w;
}

std::string reachable_endpoint(const std::string& endpoint, const std::string& worker_host) {
  const std::string tcp = "tcp://";
  if (endpoint.rfind(tcp, 0) != 0) return endpoint;  // ipc/inproc: as is
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < tcp.size()) return endpoint;
  const std::string host = endpoint.substr(tcp.size(), colon - tcp.size());
  if (host == "*" || host == "0.0.0.0" || host == "[::]" || host == "::" || host == "[::0]") {
    return tcp + worker_host + endpoint.substr(colon);
  }
  return endpoint;
}

}  // namespace pagoda::router
