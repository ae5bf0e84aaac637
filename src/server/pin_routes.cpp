// Pinning prompt prefixes in the KV pool (engine/pinning.h):
//   POST   /v1/cache/pin          {"prompt" | "messages", "cache_salt", "ttl_seconds", "model"}:
//                                 computes the prompt (no generation) and pins its full blocks
//   DELETE /v1/cache/pin          {"id"} or the same body as the pin: unpins
//   DELETE /v1/cache/pins/{id}    unpins
//   GET    /v1/cache/pins         every live pin: blocks, tokens, expiry
// Like every /v1 route they need the API key when the server has keys. The prompt is tokenized
// as a completion's (text or token ids) or a chat request's (`messages`, rendered with the
// generation prompt), and salted like one (cache_salt; per API key with salt_per_api_key), so a
// later request that starts with it hits the pinned blocks. With salt_per_api_key a tenant
// sees and unpins only its own pins.
// Errors are OpenAI error objects: 400 bad body, 404 unknown pin or model, 413 prompt too long,
// 507 the pinned share of the pool is full (code "pin_limit_exceeded").
#include <httplib.h>

#include <cmath>
#include <cstdio>

#include "engine/pinning.h"
#include "server/http_server.h"

namespace pagoda::server {

using nlohmann::json;

namespace {

std::string pin_id_text(int64_t id) { return "pin-" + std::to_string(id); }

// "pin-12" or 12 -> 12; -1 when it is neither.
int64_t parse_pin_id(const json& v) {
  if (v.is_number_integer() && v.get<int64_t>() > 0) return v.get<int64_t>();
  if (!v.is_string()) return -1;
  std::string s = v.get<std::string>();
  if (s.rfind("pin-", 0) == 0) s = s.substr(4);
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int64_t id = std::stoll(s);
  return id > 0 ? id : -1;
}

}  // namespace

json HttpServer::pin_json(const engine::PinInfo& p, int64_t block_size) const {
  const int64_t now = config_.unix_time ? config_.unix_time() : 0;
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(p.last_block_hash));
  json j{{"id", pin_id_text(p.id)},
         {"object", "cache.pin"},
         {"model", config_.model_name},
         {"prompt_tokens", p.prompt_tokens},
         {"pinned_tokens", p.pinned_tokens},
         {"num_blocks", static_cast<int64_t>(p.blocks.size())},
         {"block_size", block_size},
         {"blocks", p.blocks},
         {"last_block_hash", hash},
         {"cache_salt", p.client_salt.empty() ? json(nullptr) : json(p.client_salt)},
         {"label", p.label.empty() ? json(nullptr) : json(p.label)},
         {"created", now - static_cast<int64_t>(std::llround(p.age_s))},
         {"age_s", p.age_s},
         {"ttl_seconds", p.ttl_s > 0 ? json(p.ttl_s) : json(nullptr)},
         {"expires_in_s", p.expires_in_s >= 0 ? json(p.expires_in_s) : json(nullptr)},
         {"expires_at", p.expires_in_s >= 0 ? json(now + static_cast<int64_t>(std::llround(p.expires_in_s))) : json(nullptr)}};
  return j;
}

bool HttpServer::owns_pin(const engine::PinInfo& p, const Caller& caller) const {
  return !config_.salt_per_api_key || p.owner == caller.api_key;  // tenants see their own pins only
}

void HttpServer::reply_pin_error(httplib::Response& res, const Status& status, const std::string& param) const {
  if (status.code() == StatusCode::kResourceExhausted) {
    res.status = 507;
    res.set_content(error_body(507, status.message(), param, "pin_limit_exceeded"), "application/json");
    return;
  }
  if (status.code() == StatusCode::kNotFound && param != "model") {
    res.status = 404;
    res.set_content(error_body(404, status.message(), param, "pin_not_found"), "application/json");
    return;
  }
  reply_error(res, status, param);
}

// The prompt of a pin body (prompt or messages), as a completion or chat request tokenizes it.
Result<std::vector<int32_t>> HttpServer::pin_prompt(const std::string& body, const json& probe, std::string* param,
                                                    ApiRequest* api_out) const {
  const bool chat = probe.contains("messages");
  if (!chat && !probe.contains("prompt")) {
    *param = "prompt";
    return Status::invalid_argument("give \"prompt\" (text or token ids) or \"messages\"");
  }
  Result<ApiRequest> parsed = chat ? parse_chat_request(body, config_.limits, param)
                                   : parse_completion_request(body, config_.limits, param);
  if (!parsed.is_ok()) return parsed.status();
  const ApiRequest& api = *parsed;
  if (!api.model.empty() && api.model != config_.model_name) {
    *param = "model";
    return Status::not_found("The model '" + api.model + "' does not exist (this server serves '" + config_.model_name + "')");
  }
  *param = chat ? "messages" : "prompt";
  if (!chat && api.prompts.size() != 1) return Status::invalid_argument("a pin takes one prompt");
  Result<std::vector<int32_t>> prompt = chat ? chat_prompt(api) : text_prompt(api.prompts[0]);
  if (!prompt.is_ok()) return prompt.status();
  if (prompt->empty()) return Status::invalid_argument("the prompt is empty (no tokens)");
  *api_out = api;
  return prompt;
}

void HttpServer::register_pin_routes() {
  httplib::Server& http = listener_->server();
  http.Post("/v1/cache/pin", [this](const httplib::Request& req, httplib::Response& res) { handle_pin(req, res); });
  http.Delete("/v1/cache/pin", [this](const httplib::Request& req, httplib::Response& res) { handle_unpin(req, res, -1); });
  http.Delete(R"(/v1/cache/pins/([^/]{1,32}))", [this](const httplib::Request& req, httplib::Response& res) {
    const int64_t id = parse_pin_id(json(std::string(req.matches[1])));
    if (id < 0) {
      if (!authenticate(req, res).ok) return;
      return reply_pin_error(res, Status::not_found("no pin with id '" + std::string(req.matches[1]) + "'"));
    }
    handle_unpin(req, res, id);
  });
  http.Get("/v1/cache/pins", [this](const httplib::Request& req, httplib::Response& res) {
    const Caller caller = authenticate(req, res);
    if (!caller.ok) return;
    engine::CachePinner* pinner = engine_.pinner();
    if (pinner == nullptr) return reply_pin_error(res, Status::not_found("this engine cannot pin prefixes"));
    const int64_t bs = engine_.engine().kv_layout().block_size;
    json data = json::array();
    for (const engine::PinInfo& p : pinner->pins()) {
      if (owns_pin(p, caller)) data.push_back(pin_json(p, bs));
    }
    const engine::PinStats stats = pinner->pin_stats();
    res.set_header("Cache-Control", "no-store");
    res.set_content(dump(json{{"object", "list"},
                              {"data", data},
                              {"pinned_blocks", stats.pinned_blocks},
                              {"max_pinned_blocks", stats.max_pinned_blocks},
                              {"num_blocks", engine_.engine().kv_plan().num_blocks},
                              {"block_size", bs}}),
                    "application/json");
  });
}

void HttpServer::handle_pin(const httplib::Request& req, httplib::Response& res) {
  const Caller caller = authenticate(req, res);
  if (!caller.ok) return;
  engine::CachePinner* pinner = engine_.pinner();
  if (pinner == nullptr) return reply_pin_error(res, Status::not_found("this engine cannot pin prefixes"));
  if (draining_) return reply_error(res, Status::unavailable("The server is shutting down"));
  const json probe = json::parse(req.body, nullptr, false);
  if (probe.is_discarded() || !probe.is_object()) {
    return reply_error(res, Status::invalid_argument("the body must be a JSON object with \"prompt\" or \"messages\""));
  }
  double ttl_s = 0;
  if (probe.contains("ttl_seconds") && !probe["ttl_seconds"].is_null()) {
    const json& t = probe["ttl_seconds"];
    if (!t.is_number() || !(t.get<double>() > 0) || t.get<double>() > 315360000.0) {
      return reply_error(res, Status::invalid_argument("ttl_seconds must be a number of seconds in (0, 315360000], or "
                                                       "null/absent for a pin that lasts until it is deleted"),
                         "ttl_seconds");
    }
    ttl_s = t.get<double>();
  }
  if (probe.contains("label") && !probe["label"].is_null() && !probe["label"].is_string()) {
    return reply_error(res, Status::invalid_argument("label must be a string"), "label");
  }
  std::string param;
  ApiRequest api;
  auto prompt = pin_prompt(req.body, probe, &param, &api);
  if (!prompt.is_ok()) return reply_pin_error(res, prompt.status(), param);
  engine::PinRequest pin;
  pin.prompt = std::move(prompt).value();
  pin.cache_salt = cache_salt_for(api, caller);
  pin.client_salt = api.cache_salt;
  pin.ttl_s = ttl_s;
  pin.owner = caller.api_key;
  pin.priority = api.priority;
  if (probe.contains("label") && probe["label"].is_string()) pin.label = probe["label"].get<std::string>();
  auto pinned = engine::pin_and_wait(*pinner, std::move(pin));
  if (!pinned.is_ok()) return reply_pin_error(res, pinned.status(), param);
  json body = pin_json(*pinned, engine_.engine().kv_layout().block_size);
  body["refreshed"] = pinned->refreshed;
  res.set_content(dump(body), "application/json");
}

void HttpServer::handle_unpin(const httplib::Request& req, httplib::Response& res, int64_t id) {
  const Caller caller = authenticate(req, res);
  if (!caller.ok) return;
  engine::CachePinner* pinner = engine_.pinner();
  if (pinner == nullptr) return reply_pin_error(res, Status::not_found("this engine cannot pin prefixes"));
  if (id < 0) {  // DELETE /v1/cache/pin: {"id"} or the pin's own body
    const json probe = json::parse(req.body, nullptr, false);
    if (probe.is_discarded() || !probe.is_object()) {
      return reply_error(res, Status::invalid_argument("the body must be a JSON object with \"id\", \"prompt\" or \"messages\""));
    }
    if (probe.contains("id")) {
      id = parse_pin_id(probe["id"]);
      if (id < 0) return reply_error(res, Status::invalid_argument("id must be a pin id such as \"pin-3\""), "id");
    } else {
      std::string param;
      ApiRequest api;
      auto prompt = pin_prompt(req.body, probe, &param, &api);
      if (!prompt.is_ok()) return reply_pin_error(res, prompt.status(), param);
      // Salted per key with salt_per_api_key: only the caller's own pin can match.
      auto removed = pinner->unpin(*prompt, cache_salt_for(api, caller));
      if (!removed.is_ok()) return reply_pin_error(res, removed.status(), param);
      json body = pin_json(*removed, engine_.engine().kv_layout().block_size);
      body["deleted"] = true;
      return res.set_content(dump(body), "application/json");
    }
  }
  for (const engine::PinInfo& p : pinner->pins()) {
    if (p.id != id || !owns_pin(p, caller)) continue;
    auto removed = pinner->unpin(id);
    if (!removed.is_ok()) break;  // expired meanwhile
    json body = pin_json(*removed, engine_.engine().kv_layout().block_size);
    body["deleted"] = true;
    return res.set_content(dump(body), "application/json");
  }
  reply_pin_error(res, Status::not_found("no pin with id '" + pin_id_text(id) + "'"), "id");
}

}  // namespace pagoda::server
