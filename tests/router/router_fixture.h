// Helpers of the multi-process router tests: `pagoda serve` workers with KV events on free
// loopback ports, a `pagoda router` over them, JSON over HTTP, and bounded waits on the
// router's view of its workers (GET /router/workers).
#pragma once

#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "eventually.h"
#include "pagoda_process.h"
#include "test_data.h"

namespace pagoda::testing {

using nlohmann::json;

inline std::string stories_model() { return stories_dir() + "/stories260K.gguf"; }

// `pagoda serve` with KV events on ephemeral loopback ports.
inline std::unique_ptr<PagodaProcess> start_worker(int port = 0, const std::string& extra = "") {
  return std::make_unique<PagodaProcess>(
      "serve -m " + stories_model() + " --port " + std::to_string(port) + " -c 512 -t 1 --kv-cache-mem 8M " + extra +
      " --kv-events-config '{\"enable_kv_cache_events\":true,\"endpoint\":\"tcp://127.0.0.1:*\","
      "\"replay_endpoint\":\"tcp://127.0.0.1:*\"}'");
}

inline std::unique_ptr<PagodaProcess> start_router(const std::vector<int>& worker_ports, const std::string& extra = "") {
  std::string args = "router -m " + stories_model() + " --port 0 " + extra;
  for (int p : worker_ports) args += " --worker http://127.0.0.1:" + std::to_string(p);
  return std::make_unique<PagodaProcess>(args);
}

struct Reply {
  int status = 0;
  std::string body;
  json j;
};

inline Reply post(int port, const std::string& path, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.j = json::parse(r->body, nullptr, false);
  return out;
}

// POST with the body received as it arrives; on_bytes returns false to hang up.
struct StreamReply {
  int status = 0;
  std::string content_type;
  std::string bytes;
  bool ok = false;  // the transfer completed
};
inline StreamReply post_stream(int port, const std::string& path, const json& body,
                               const std::function<bool(const std::string& so_far)>& on_bytes = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  StreamReply out;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.headers.emplace("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    out.content_type = r.get_header_value("Content-Type");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    out.bytes.append(data, n);
    return on_bytes == nullptr || on_bytes(out.bytes);
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  out.ok = c.send(req, res, error);
  return out;
}

// The data payloads of an SSE body, in order.
inline std::vector<std::string> sse_data(const std::string& bytes) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = bytes.find("data: ", pos)) != std::string::npos) {
    const size_t end = bytes.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(bytes.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

inline json get_json(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10);
  auto r = c.Get(path.c_str());
  if (!r || r->status != 200) return json();
  return json::parse(r->body, nullptr, false);
}

inline std::string get_text(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get(path.c_str());
  return r ? r->body : "";
}

// The router's entry for the worker on `worker_port`.
inline json worker_state(int router_port, int worker_port) {
  const json all = get_json(router_port, "/router/workers");
  if (!all.is_array()) return json();
  for (const json& w : all) {
    if (w.value("url", "") == "http://127.0.0.1:" + std::to_string(worker_port)) return w;
  }
  return json();
}

inline int64_t cached_tokens(const Reply& r) {
  if (!r.j.is_object() || !r.j.contains("usage")) return -1;
  return r.j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{-1});
}

// A story prompt of about n tokens for stories260K (a different one per seed).
inline std::string story(int seed, int sentences = 8) {
  static const char* kNames[] = {"Lily", "Tom", "Max", "Sue", "Ben", "Amy", "Sam", "Mia"};
  static const char* kThings[] = {"ball", "tree", "dog", "cake", "boat", "kite", "hat", "bird"};
  std::string s = "Once upon a time there was a little child named " + std::string(kNames[seed % 8]) + ".";
  for (int i = 0; i < sentences; ++i) {
    s += " " + std::string(kNames[(seed + i) % 8]) + " liked the " + kThings[(seed * 3 + i) % 8] + " very much.";
  }
  return s;
}

}  // namespace pagoda::testing
