// HttpServer: the OpenAI-compatible HTTP front of a ServingEngine (cpp-httplib).
//
//   POST /v1/completions, /v1/chat/completions   generate (JSON, or SSE with "stream": true)
//   GET  /v1/models, /v1/models/{id}             the one served model
//   GET  /health                                 200 {"status":"ok"}; 503 while draining
//   GET  /metrics                                Prometheus text (server/prometheus.h)
//   GET  /v1/kv/events                           how this instance names its blocks (model
//                                                fingerprint, KV format, block size, salting)
//                                                and where its KV events are published
//   GET  /v1/kv/events/snapshot                  every block its events have announced, per
//                                                medium, as of batch `seq` (a subscriber's resync)
//   GET  /v1/kv/stats, /v1/kv/requests/{id}      KV introspection (server/kv_json.h)
//   POST /v1/kv/explain                          why a prompt would (not) hit the prefix cache
//   GET  /dashboard                              the live KV dashboard (assets compiled in)
//   POST /v1/cache/pin, DELETE /v1/cache/pin,    pin a prompt's blocks in the pool (with a ttl),
//   DELETE /v1/cache/pins/{id}, GET /v1/cache/pins  unpin, list (server/pin_routes.cpp)
//
// Threads: httplib answers each connection on a thread of its own (http::ConnectionGate: up to
// http_threads at once; beyond them a connection gets 503 and is closed); the engine
// runs its loop on its own thread. A generate handler tokenizes, submits one engine request per
// prompt, then waits on its RequestStream, checking every poll_interval_s that its client is
// still connected (ConnectionProbe, failed writes): a client that has gone has its requests
// aborted, which frees their blocks within one engine step.
//
// Auth: with api_keys, every /v1 route needs "Authorization: Bearer KEY" (401 otherwise; keys are
// compared in constant time);
// /health and /metrics are open. salt_per_api_key prefixes each request's cache salt with its
// key, so tenants never share prefix-cache entries (no prefix-timing side channel between them).
//
// Errors are OpenAI error objects: 400 malformed or invalid, 401 bad key, 404 unknown model or
// route, 413 body over max_body_bytes or prompt too long for the context, 429 queue full, 503
// shutting down (both with Retry-After).
//
// Life: bind() -> listen() (blocks) ... begin_drain() (new work gets 503) -> stop() (from any
// thread; listen() returns once the in-flight handlers have).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/status.h"
#include "engine/pd_coordinator.h"
#include "engine/pinning.h"
#include "engine/serving.h"
#include "events/kv_event_publisher.h"
#include "server/http/listener.h"
#include "server/grammar_constraint.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_stream.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace pagoda::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (bind() returns it)
  std::vector<std::string> api_keys;        // empty: no authentication
  bool salt_per_api_key = false;
  std::string model_name;                   // what /v1/models lists and responses name
  RequestLimits limits;                     // vocab_size and max_context must be set
  std::vector<int32_t> end_of_text_ids;     // extra stop tokens unless ignore_eos (e.g. BOS)
  size_t max_body_bytes = 8u << 20;
  int http_threads = 512;                   // connections served at once (beyond: 503)
  int read_timeout_s = 5;                   // a connection silent this long (idle or mid-request) is closed
  int retry_after_s = 1;
  double poll_interval_s = 0.05;            // client checks while waiting for tokens
  uint64_t seed = 0;                        // seeds for requests without one are drawn from this
  std::function<int64_t()> unix_time;       // "created" fields; null: 0
  events::KvEventPublisher* kv_events = nullptr;  // null: no KV events (the info route says so)
  std::string instance_id;                  // this process's id (a subscriber notices a restart)
  bool dashboard = true;                    // GET /dashboard (server/kv_routes.cpp); --no-dashboard
  engine::PdCoordinator* pd = nullptr;      // P/D disaggregation (server/pd_routes.cpp); null: off
  // Appends more Prometheus families to /metrics (any HTTP thread; e.g. the remote tier's Redis
  // counters, tools/kv_remote.h); null: none.
  std::function<void(std::string&)> extra_metrics;
};

class HttpServer {
 public:
  HttpServer(engine::ServingEngine& engine, ChatTemplate chat_template, ServerConfig config, const Logger& logger);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port (the chosen one when port is 0).
  Result<int> bind();
  // Serves until stop(). Precondition: bind() succeeded.
  void listen();
  void begin_drain() { draining_ = true; }
  bool draining() const { return draining_; }
  void stop();

 private:
  struct Caller {
    bool ok = false;
    std::string api_key;  // the key it presented (when keys are configured)
  };
  void routes();
  void kv_events_routes(httplib::Server& http);  // server/kv_events_routes.cpp
  // P/D (server/pd_routes.cpp): GET /v1/pd/stats; a generate request's kv_transfer_params.
  struct PdPlan {
    bool lend = false;                      // prefill side: answer with kv_transfer_params
    std::vector<int32_t> prompt;
    std::string cache_salt;
    std::string transfer_note;              // decode side: what the import did (a header)
    kvcache::SeqId imported = -1;           // decode side: the pulled KV, requests[0].adopt_kv
  };
  void pd_routes(httplib::Server& http);
  Status prepare_pd(const httplib::Request& req, const ApiRequest& api,
                    std::vector<engine::CompletionRequest>& requests, PdPlan& plan);
  void lend_and_reply(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                      std::shared_ptr<RequestStream> stream, std::vector<engine::RequestId> ids, const PdPlan& plan);
  // /v1/kv/stats, /v1/kv/requests/{id}, /v1/kv/explain and /dashboard (server/kv_routes.cpp).
  void register_kv_routes();
  void handle_explain(const httplib::Request& req, httplib::Response& res);
  // /v1/cache/pin(s) (server/pin_routes.cpp).
  void register_pin_routes();
  void handle_pin(const httplib::Request& req, httplib::Response& res);
  void handle_unpin(const httplib::Request& req, httplib::Response& res, int64_t id);  // id -1: from the body
  Caller authenticate(const httplib::Request& req, httplib::Response& res) const;
  void reply_error(httplib::Response& res, const Status& status, const std::string& param = "") const;
  void reply_pin_error(httplib::Response& res, const Status& status, const std::string& param = "") const;
  Result<std::vector<int32_t>> pin_prompt(const std::string& body, const nlohmann::json& probe, std::string* param,
                                          ApiRequest* api_out) const;
  nlohmann::json pin_json(const engine::PinInfo& pin, int64_t block_size) const;
  bool owns_pin(const engine::PinInfo& pin, const Caller& caller) const;
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  // Tokenized engine requests of an ApiRequest (one per prompt).
  Result<std::vector<engine::CompletionRequest>> engine_requests(const ApiRequest& api, const Caller& caller);
  Result<std::vector<int32_t>> chat_prompt(const ApiRequest& api) const;
  std::string forced_reply_start(const ApiRequest& api) const;
  Result<std::shared_ptr<structured::CompiledGrammar>> reply_grammar(const ApiRequest& api);
  Result<std::shared_ptr<structured::CompiledGrammar>> call_grammar(const ApiRequest& api);
  std::shared_ptr<const structured::TokenIndex> vocabulary_index();  // built on first use
  Result<std::vector<int32_t>> text_prompt(const PromptInput& prompt) const;
  // The engine's cache salt of a request (salted per key with salt_per_api_key).
  std::string cache_salt_for(const ApiRequest& api, const Caller& caller) const;
  void wait_and_reply(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                      std::shared_ptr<RequestStream> stream, std::vector<engine::RequestId> ids);
  void stream_reply(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                    std::shared_ptr<RequestStream> stream, std::vector<engine::RequestId> ids);
  ResponseMeta meta_for(const ApiRequest& api);
  uint64_t draw_seed();

  engine::ServingEngine& engine_;
  ChatTemplate chat_template_;
  std::vector<int32_t> end_of_turn_ids_;       // chat: the template's end-of-turn token, if one
  std::vector<std::string> end_of_turn_stops_; // chat: else its text as a stop string
  int32_t marker_token_ = -1;                  // a control token that opens tool calls, if one
  std::mutex token_index_mutex_;
  std::shared_ptr<const structured::TokenIndex> token_index_;  // the vocabulary trie, built on first use
  GrammarCache grammars_{32};                  // compiled reply grammars by schema
  std::string marker_text_;
  ServerConfig config_;
  const Logger& logger_;
  std::unique_ptr<http::HttpListener> listener_;  // the httplib server and its set-up
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> next_id_{1};
  std::mutex seed_mutex_;
  Rng seed_rng_;
};

}  // namespace pagoda::server
