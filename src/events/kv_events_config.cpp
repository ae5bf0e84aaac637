#include "events/kv_events_config.h"

#include <nlohmann/json.hpp>

namespace pagoda::events {

using nlohmann::json;

namespace {

Status bad(const std::string& key, const std::string& why) {
  return Status::invalid_argument("--kv-events-config: " + key + " " + why);
}

Status read_count(const json& j, const char* key, int64_t min, int64_t& out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::ok();
  if (!it->is_number_integer()) return bad(key, "must be an integer, got " + it->dump());
  const int64_t v = it->get<int64_t>();
  if (v < min || (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return bad(key, "must be at least " + std::to_string(min) + ", got " + it->dump());
  }
  out = v;
  return Status::ok();
}

Status read_text(const json& j, const char* key, bool nullable, std::string& out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::ok();
  if (it->is_null() && nullable) {
    out.clear();
    return Status::ok();
  }
  if (!it->is_string()) return bad(key, std::string("must be a string") + (nullable ? " or null" : "") + ", got " + it->dump());
  out = it->get<std::string>();
  return Status::ok();
}

Status check_endpoint(const char* key, const std::string& endpoint) {
  for (const char* transport : {"tcp://", "ipc://", "inproc://"}) {
    if (endpoint.rfind(transport, 0) == 0 && endpoint.size() > std::string_view(transport).size()) return Status::ok();
  }
  return bad(key, "must be a ZeroMQ endpoint (tcp://HOST:PORT, ipc://PATH or inproc://NAME), got \"" + endpoint + "\"");
}

}  // namespace

Result<KvEventsConfig> parse_kv_events_config(std::string_view text) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Status::invalid_argument(std::string("--kv-events-config: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::invalid_argument("--kv-events-config: must be a JSON object");
  static const char* kKeys[] = {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "buffer_steps",
                                "hwm", "max_queue_size", "topic", "encoding"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) {
      return bad("\"" + key + "\"", "is not a key (enable_kv_cache_events, publisher, endpoint, replay_endpoint, "
                                    "buffer_steps, hwm, max_queue_size, topic, encoding)");
    }
  }
  KvEventsConfig c;
  if (auto it = j.find("enable_kv_cache_events"); it != j.end()) {
    if (!it->is_boolean()) return bad("enable_kv_cache_events", "must be true or false, got " + it->dump());
    c.enable_kv_cache_events = it->get<bool>();
  }
  PAGODA_RETURN_IF_ERROR(read_text(j, "publisher", true, c.publisher));
  if (c.publisher.empty()) c.publisher = c.enable_kv_cache_events ? "zmq" : "null";
  if (c.publisher != "zmq" && c.publisher != "null") return bad("publisher", "must be \"zmq\" or \"null\", got \"" + c.publisher + "\"");
  PAGODA_RETURN_IF_ERROR(read_text(j, "endpoint", false, c.endpoint));
  PAGODA_RETURN_IF_ERROR(check_endpoint("endpoint", c.endpoint));
  PAGODA_RETURN_IF_ERROR(read_text(j, "replay_endpoint", true, c.replay_endpoint));
  if (!c.replay_endpoint.empty()) PAGODA_RETURN_IF_ERROR(check_endpoint("replay_endpoint", c.replay_endpoint));
  PAGODA_RETURN_IF_ERROR(read_count(j, "buffer_steps", 1, c.buffer_steps));
  PAGODA_RETURN_IF_ERROR(read_count(j, "hwm", 0, c.hwm));
  PAGODA_RETURN_IF_ERROR(read_count(j, "max_queue_size", 1, c.max_queue_size));
  if (c.hwm > INT32_MAX) return bad("hwm", "must be at most " + std::to_string(INT32_MAX));
  PAGODA_RETURN_IF_ERROR(read_text(j, "topic", false, c.topic));
  std::string encoding = "map";
  PAGODA_RETURN_IF_ERROR(read_text(j, "encoding", false, encoding));
  if (encoding == "map") {
    c.encoding = EventEncoding::kMap;
  } else if (encoding == "array") {
    c.encoding = EventEncoding::kArray;
  } else {
    return bad("encoding", "must be \"map\" (current vLLM) or \"array\" (legacy), got \"" + encoding + "\"");
  }
  return c;
}

bool endpoint_binds(std::string_view endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  return endpoint.find('*') != std::string_view::npos || endpoint.find("::") != std::string_view::npos;
}

std::string offset_endpoint(std::string_view endpoint, int32_t rank) {
  std::string e(endpoint);
  if (rank == 0 || e.empty()) return e;
  if (e.rfind("inproc://", 0) == 0 || e.rfind("ipc://", 0) == 0) return e + "_dp" + std::to_string(rank);
  const size_t colon = e.rfind(':');
  if (e.rfind("tcp://", 0) == 0 && colon != std::string::npos && colon > 5) {
    const std::string port = e.substr(colon + 1);
    if (!port.empty() && port.find_first_not_of("0123456789") == std::string::npos) {
      return e.substr(0, colon + 1) + std::to_string(std::stol(port) + rank);
    }
  }
  return e;
}

}  // namespace pagoda::events
