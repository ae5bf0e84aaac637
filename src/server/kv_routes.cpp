// The KV introspection API and the dashboard (routes listed at the top of server/http_server.h).
//
// /v1/kv/* need the API key like every /v1 route; /dashboard and its assets are static (no data
// in them) and open, and the page sends the key the user types as an Authorization header, so a
// key never appears in a URL or an access log. The assets are served with a Content-Security-
// Policy that lets the page talk to this origin only.
#include <httplib.h>

#include "engine/introspection.h"
#include "server/dashboard_assets.h"
#include "server/http_server.h"
#include "server/kv_json.h"

namespace pagoda::server {

using nlohmann::json;

namespace {

bool flag(const httplib::Request& req, const char* name, bool fallback) {
  if (!req.has_param(name)) return fallback;
  const std::string v = req.get_param_value(name);
  return !(v == "0" || v == "false" || v == "no");
}

}  // namespace

void HttpServer::register_kv_routes() {
  httplib::Server& http = listener_->server();
  http.Get("/v1/kv/stats", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    engine::KvIntrospector* kv = engine_.introspector();
    if (kv == nullptr) return reply_error(res, Status::not_found("this engine has no KV introspection"));
    engine::SnapshotOptions options;
    options.block_map = flag(req, "block_map", true);
    options.requests = flag(req, "requests", true);
    if (req.has_param("prefixes")) {
      const std::string v = req.get_param_value("prefixes");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 1000) {
        return reply_error(res, Status::invalid_argument("prefixes must be an integer in [0, 1000]"), "prefixes");
      }
      options.max_prefixes = static_cast<int>(n);
    }
    json body = snapshot_json(kv->snapshot(options));
    body["served_model"] = config_.model_name;
    body["experts"] = engine_.engine().model().config().n_expert;  // > 0: GET /v1/moe/experts has the load
    res.set_header("Cache-Control", "no-store");
    res.set_content(dump(body), "application/json");
  });
  http.Get(R"(/v1/kv/requests/([0-9]{1,18}))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    engine::KvIntrospector* kv = engine_.introspector();
    if (kv == nullptr) return reply_error(res, Status::not_found("this engine has no KV introspection"));
    auto dumped = kv->request_kv(std::stoll(req.matches[1]));
    if (!dumped.is_ok()) return reply_error(res, dumped.status());
    res.set_content(dump(request_kv_json(*dumped)), "application/json");
  });
  http.Post("/v1/kv/explain", [this](const httplib::Request& req, httplib::Response& res) { handle_explain(req, res); });

  if (!config_.dashboard) return;
  for (const DashboardAsset& asset : dashboard_assets()) {
    http.Get(std::string(asset.path), [&asset](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(asset.body), std::string(asset.content_type));
    });
  }
}

void HttpServer::handle_explain(const httplib::Request& req, httplib::Response& res) {
  const Caller caller = authenticate(req, res);
  if (!caller.ok) return;
  engine::KvIntrospector* kv = engine_.introspector();
  if (kv == nullptr) return reply_error(res, Status::not_found("this engine has no KV introspection"));
  // The body of a completion (prompt) or chat (messages) request; generation fields are allowed
  // and ignored, so a client can send the very request it wonders about.
  json probe = json::parse(req.body, nullptr, false);
  if (probe.is_discarded() || !probe.is_object()) {
    return reply_error(res, Status::invalid_argument("the body must be a JSON object with \"prompt\" or \"messages\""));
  }
  const bool chat = probe.contains("messages");
  if (!chat && !probe.contains("prompt")) {
    return reply_error(res, Status::invalid_argument("give \"prompt\" (text or token ids) or \"messages\""), "prompt");
  }
  std::string param;
  Result<ApiRequest> parsed = chat ? parse_chat_request(req.body, config_.limits, &param)
                                   : parse_completion_request(req.body, config_.limits, &param);
  if (!parsed.is_ok()) return reply_error(res, parsed.status(), param);
  const ApiRequest& api = *parsed;
  if (!api.model.empty() && api.model != config_.model_name) {
    return reply_error(res, Status::not_found("The model '" + api.model + "' does not exist (this server serves '" +
                                              config_.model_name + "')"), "model");
  }
  if (!chat && api.prompts.size() != 1) {
    return reply_error(res, Status::invalid_argument("explain takes one prompt"), "prompt");
  }
  engine::ExplainRequest request;
  request.cache_salt = cache_salt_for(api, caller);
  request.kv_select = api.kv_select;
  Result<std::vector<int32_t>> prompt = chat ? chat_prompt(api) : text_prompt(api.prompts[0]);
  if (!prompt.is_ok()) return reply_error(res, prompt.status(), chat ? "messages" : "prompt");
  request.prompt = std::move(prompt).value();
  if (chat) {
    // After an earlier turn k the cache held that turn's prompt (the conversation up to reply k,
    // rendered to ask for it) and the reply. When the whole conversation now renders to a text
    // that does not start with that, the template (or the client) rewrote history: pass those
    // tokens so explain can say where the chain leaves them. Text first, so that a tokenization
    // difference alone is not called a rewrite.
    auto full = chat_template_.render(api.messages, true);
    for (size_t k = 1; full.is_ok() && k < api.messages.size(); ++k) {
      if (api.messages[k].role != "assistant") continue;
      std::vector<ChatMessage> before(api.messages.begin(), api.messages.begin() + static_cast<std::ptrdiff_t>(k));
      auto asked = chat_template_.render(before, true);
      if (!asked.is_ok()) continue;
      const std::string cached_text = *asked + api.messages[k].content;
      if (full->compare(0, cached_text.size(), cached_text) == 0) continue;  // history kept as it was
      ApiRequest earlier = api;
      earlier.messages = std::move(before);
      Result<std::vector<int32_t>> turn = chat_prompt(earlier);
      if (!turn.is_ok()) continue;
      const model::Tokenizer& tok = engine_.tokenizer();
      const std::vector<int32_t> reply = tok.encode(api.messages[k].content, false, true);
      turn->insert(turn->end(), reply.begin(), reply.end());
      request.earlier_turns.push_back(std::move(turn).value());
    }
  }
  auto explained = kv->explain(request);
  if (!explained.is_ok()) return reply_error(res, explained.status(), chat ? "messages" : "prompt");
  json body = explain_json(*explained);
  body["model"] = config_.model_name;
  res.set_content(dump(body), "application/json");
}

}  // namespace pagoda::server
