// P/D disaggregation in the router: the prefill leg of a generate request (router_server.h,
// RouterConfig::prefill_workers). The request goes to a prefill worker as vLLM's proxy sends it
// (max_tokens 1, not streamed, kv_transfer_params {"do_remote_decode": true, remote_*: null});
// the kv_transfer_params of its answer are added to the request the decode worker gets.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "router/router_server.h"

namespace pagoda::router {

using nlohmann::json;

std::optional<std::string> RouterServer::prefill_remotely(const httplib::Request& req) {
  json original = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!original.is_object()) return std::nullopt;  // the decode worker answers the error
  json prefill = original;
  prefill["max_tokens"] = 1;
  if (prefill.contains("max_completion_tokens")) prefill["max_completion_tokens"] = 1;
  prefill["stream"] = false;
  prefill.erase("stream_options");
  prefill["kv_transfer_params"] = json{{"do_remote_decode", true}, {"do_remote_prefill", false},
                                       {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                       {"remote_host", nullptr},      {"remote_port", nullptr}};
  const std::string body = prefill.dump();
  const size_t n = config_.prefill_workers.size();
  const uint64_t start = prefill_cursor_.fetch_add(1);
  for (size_t k = 0; k < n; ++k) {
    const WorkerAddress& w = config_.prefill_workers[(start + k) % n];
    UpstreamRequest u;
    u.host = w.host;
    u.port = w.port;
    u.path = req.path;
    u.body = body;
    if (req.has_header("Authorization")) u.headers.emplace("Authorization", req.get_header_value("Authorization"));
    if (!config_.worker_api_key.empty()) {
      u.headers.erase("Authorization");
      u.headers.emplace("Authorization", "Bearer " + config_.worker_api_key);
    }
    u.connect_timeout_s = config_.connect_timeout_s;
    u.read_timeout_s = config_.request_timeout_s;
    Upstream up(std::move(u));
    std::string answer;
    Upstream::State s;
    do {
      s = up.take(answer, 1.0);
    } while (s != Upstream::State::kDone && s != Upstream::State::kFailed);
    if (s == Upstream::State::kFailed || up.status() != 200) {
      logger_.warn("P/D: prefill on " + w.url + " failed (" +
                   (s == Upstream::State::kFailed ? up.error() : "HTTP " + std::to_string(up.status())) + ")");
      continue;
    }
    json reply = json::parse(answer, nullptr, false);
    if (!reply.is_object() || !reply.contains("kv_transfer_params") || !reply["kv_transfer_params"].is_object()) {
      logger_.warn("P/D: the prefill worker " + w.url + " answered without kv_transfer_params");
      continue;
    }
    count(&RouterCounters::pd_prefills);
    json decode = std::move(original);
    decode["kv_transfer_params"] = reply["kv_transfer_params"];
    return decode.dump();
  }
  count(&RouterCounters::pd_prefill_failures);
  return std::nullopt;
}

}  // namespace pagoda::router
