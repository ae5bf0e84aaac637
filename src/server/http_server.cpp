#include "server/http_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/http/auth.h"
#include "server/prometheus.h"

namespace pagoda::server {

using nlohmann::json;

HttpServer::HttpServer(engine::ServingEngine& engine, ChatTemplate chat_template, ServerConfig config,
                       const Logger& logger)
    : engine_(engine),
      chat_template_(std::move(chat_template)),
      config_(std::move(config)),
      logger_(logger),
      listener_(std::make_unique<http::HttpListener>(
          http::ListenerConfig{config_.host, config_.port, config_.http_threads, config_.max_body_bytes,
                               config_.read_timeout_s, config_.read_timeout_s},
          logger)),
      seed_rng_(config_.seed) {
  CHECK(config_.limits.vocab_size > 0 && config_.limits.max_context > 0) << "ServerConfig.limits must be set";
  // The template's end of turn ends a chat reply: as a token when the vocab has it as one.
  const std::string eot = chat_template_.end_of_turn();
  if (!eot.empty()) {
    const std::vector<int32_t> ids = engine_.tokenizer().encode(eot, false, true);
    if (ids.size() == 1 && engine_.tokenizer().token_to_piece(ids[0], true) == eot) {
      end_of_turn_ids_ = ids;
    } else {
      end_of_turn_stops_ = {eot};
    }
  }
  // A control token that opens tool calls is rendered as "" by the detokenizer: the reply
  // parser is told its text when the token comes (mistral [TOOL_CALLS], llama3 <|python_tag|>).
  const model::ToolSyntax syntax = chat_template_.tool_syntax();
  const std::string marker = syntax == model::ToolSyntax::kMistral ? "[TOOL_CALLS]"
                             : syntax == model::ToolSyntax::kLlama3 ? "<|python_tag|>" : "";
  if (!marker.empty()) {
    const std::vector<int32_t> ids = engine_.tokenizer().encode(marker, false, true);
    if (ids.size() == 1 && engine_.tokenizer().token_to_piece(ids[0], true) == marker &&
        engine_.tokenizer().token_to_piece(ids[0]).empty()) {
      marker_token_ = ids[0];
      marker_text_ = marker;
    }
  }
  routes();
}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::bind() { return listener_->bind(); }

void HttpServer::listen() { listener_->listen(); }

void HttpServer::stop() {
  if (listener_ != nullptr) listener_->stop();
}

void HttpServer::reply_error(httplib::Response& res, const Status& status, const std::string& param) const {
  res.status = http_status_for(status, draining_);
  if (res.status == 429 || res.status == 503) res.set_header("Retry-After", std::to_string(config_.retry_after_s));
  std::string code;
  if (res.status == 404) code = "model_not_found";
  if (res.status == 413) code = "context_length_exceeded";
  res.set_content(error_body(res.status, status.message(), param, code), "application/json");
}

HttpServer::Caller HttpServer::authenticate(const httplib::Request& req, httplib::Response& res) const {
  if (config_.api_keys.empty()) return {true, ""};
  const std::string header = req.get_header_value("Authorization");
  const std::string key = http::bearer_token(header);
  if (http::api_key_matches(key, config_.api_keys)) return {true, key};
  res.status = 401;
  res.set_content(error_body(401, header.empty() ? "Missing API key: send \"Authorization: Bearer KEY\""
                                                 : "Incorrect API key provided",
                             "", "invalid_api_key"),
                  "application/json");
  return {};
}

void HttpServer::routes() {
  httplib::Server& http = listener_->server();
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = draining_ ? 503 : 200;
    res.set_content(dump(json{{"status", draining_ ? "draining" : "ok"}}), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = prometheus_text(engine_.metrics());
    if (config_.extra_metrics) config_.extra_metrics(text);
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  // Expert load of a mixture-of-experts model: tokens routed to each expert of each MoE layer
  // since start (what /metrics sums up as a histogram per layer), for dashboards and planners.
  http.Get("/v1/moe/experts", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    const engine::ServingMetrics m = engine_.metrics();
    if (m.n_expert <= 0 || m.expert_tokens.empty()) {
      return reply_error(res, Status::not_found("the served model has no mixture-of-experts layers"));
    }
    const int64_t E = m.n_expert, n_layer = static_cast<int64_t>(m.expert_tokens.size()) / E;
    json layers = json::array();
    for (int64_t l = m.moe_first_layer; l < n_layer; ++l) {
      const auto row = m.expert_tokens.begin() + l * E;
      layers.push_back(json{{"layer", l}, {"tokens", std::vector<int64_t>(row, row + E)}});
    }
    res.set_header("Cache-Control", "no-store");
    res.set_content(dump(json{{"object", "moe.expert_load"}, {"experts", E},
                              {"experts_per_token", engine_.engine().model().config().n_expert_used},
                              {"layers", std::move(layers)}}),
                    "application/json");
  });
  auto model_object = [this] {
    return json{{"id", config_.model_name}, {"object", "model"},
                {"created", config_.unix_time ? config_.unix_time() : 0}, {"owned_by", "pagoda"},
                {"max_model_len", config_.limits.max_context}};
  };
  http.Get("/v1/models", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
  });
  http.Get("/v1/models/(.+)", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    if (req.matches[1] != config_.model_name) {
      return reply_error(res, Status::not_found("The model '" + std::string(req.matches[1]) + "' does not exist"), "model");
    }
    res.set_content(dump(model_object()), "application/json");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, true);
  });
  kv_events_routes(http);
  pd_routes(http);
  register_kv_routes();
  register_pin_routes();
}

uint64_t HttpServer::draw_seed() {
  std::lock_guard lock(seed_mutex_);
  return seed_rng_.next_u64();
}

ResponseMeta HttpServer::meta_for(const ApiRequest& api) {
  ResponseMeta meta;
  char id[32];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(next_id_.fetch_add(1)));
  meta.id = std::string(api.chat ? "chatcmpl-" : "cmpl-") + id;
  meta.created = config_.unix_time ? config_.unix_time() : 0;
  meta.model = config_.model_name;
  meta.chat = api.chat;
  meta.logprobs = api.logprobs;
  meta.include_usage = api.stream && api.include_usage;
  if (api.chat) {
    const bool calls = !api.tools.empty() && api.tool_choice != ToolChoice::kNone;
    meta.tool_syntax = calls ? chat_template_.tool_syntax() : model::ToolSyntax::kNone;
    meta.reasoning = chat_template_.reasoning_syntax();
    meta.parallel_tool_calls = api.parallel_tool_calls;
    model::ChatRenderOptions options;
    options.enable_thinking = api.enable_thinking;
    meta.forced_prefix = chat_template_.reply_opening(options) + forced_reply_start(api);
    meta.marker_token = marker_token_;
    meta.marker_text = marker_text_;
  }
  return meta;
}

}  // namespace pagoda::server
