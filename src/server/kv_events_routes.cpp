// GET /v1/kv/events and /v1/kv/events/snapshot: what a router (or any indexer) needs to follow
// this instance's KV cache: how it hashes blocks, where it publishes their events, and the full
// state for a resync.
#include <httplib.h>

#include "model/text/prompt_tokens.h"
#include "server/http_server.h"

namespace pagoda::server {

using nlohmann::json;

void HttpServer::kv_events_routes(httplib::Server& http) {
  http.Get("/v1/kv/events", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    const engine::Engine& eng = engine_.engine();
    json events = {{"enabled", config_.kv_events != nullptr}};
    if (const events::KvEventPublisher* p = config_.kv_events) {
      const events::PublisherStats st = p->stats();
      events["endpoint"] = p->endpoint();
      events["replay_endpoint"] = p->replay_endpoint().empty() ? json(nullptr) : json(p->replay_endpoint());
      events["topic"] = p->config().topic;
      events["encoding"] = p->config().encoding == events::EventEncoding::kMap ? "map" : "array";
      events["last_seq"] = st.last_seq;
      events["events_dropped"] = st.events_dropped;
    }
    const json body = {
        {"instance_id", config_.instance_id},
        {"model", config_.model_name},
        // hash_i = xxh64 (or, with --kv-hash sha256, SHA-256) chain over the block's token ids,
        // from hash_{i-1} and the namespace key of (model_fingerprint, kv_format, cache_salt_key(salt))
        {"block_hash", std::string(kvcache::block_hash_scheme_name(eng.config().kv_hash))},
        {"block_size", eng.kv_layout().block_size},
        {"model_fingerprint", events::hash_to_hex(eng.model_fingerprint())},
        {"kv_format", events::hash_to_hex(eng.kv_format_key())},
        {"prefix_caching", eng.config().enable_prefix_caching},
        {"salt_per_api_key", config_.salt_per_api_key},
        {"tokenizer_probe", model::encode_prompt(engine_.tokenizer(), model::kTokenizerProbe)},
        {"kv_events", events}};
    res.set_content(dump(body), "application/json");
  });
  http.Get("/v1/kv/events/snapshot", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    if (config_.kv_events == nullptr) {
      return reply_error(res, Status::not_found("KV events are off on this instance (--kv-events-config)"));
    }
    auto snapshot = config_.kv_events->snapshot();
    if (!snapshot.is_ok()) {
      res.status = 503;
      res.set_content(error_body(503, snapshot.status().message()), "application/json");
      return;
    }
    res.set_content(events::snapshot_to_json(*snapshot), "application/json");
  });
}

}  // namespace pagoda::server
