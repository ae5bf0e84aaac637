// P/D disaggregation over HTTP: a generate request's "kv_transfer_params" (vLLM's names,
// transfer/kv_transfer_params.h) and GET /v1/pd/stats.
//   {"do_remote_decode": true}  prefill side: run the prompt (one prompt, n 1, not streamed),
//                               then lend its blocks and answer with kv_transfer_params
//   {"do_remote_prefill": true} decode side: pull the lent blocks, then generate as usual
//                               (header X-Pagoda-Kv-Transfer says what the pull did); any
//                               failure computes the prompt here
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/http/connection.h"
#include "server/http_server.h"

namespace pagoda::server {

using nlohmann::json;

Status HttpServer::prepare_pd(const httplib::Request& req, const ApiRequest& api,
                              std::vector<engine::CompletionRequest>& requests, PdPlan& plan) {
  PAGODA_ASSIGN_OR_RETURN(std::optional<transfer::KvTransferParams> params,
                          transfer::kv_transfer_params_from_body(req.body));
  if (!params) return Status::ok();
  engine::PdCoordinator* pd = config_.pd;
  if (params->do_remote_decode) {
    if (pd == nullptr || !pd->lends()) {
      return Status::invalid_argument("kv_transfer_params.do_remote_decode: this server does not lend KV "
                                      "(start it with --role prefill or both)");
    }
    if (requests.size() != 1 || api.n != 1 || api.stream) {
      return Status::invalid_argument("kv_transfer_params.do_remote_decode needs one prompt, n 1 and no streaming");
    }
    plan.lend = true;
    requests[0].park_kv = true;  // its KV, the partial last block too, stays for lend()
    plan.prompt = requests[0].prompt;
    plan.cache_salt = requests[0].cache_salt;
    return Status::ok();
  }
  if (!params->do_remote_prefill) return Status::ok();
  if (requests.size() != 1) return Status::invalid_argument("kv_transfer_params.do_remote_prefill needs one prompt");
  if (pd == nullptr || !pd->imports()) {
    plan.transfer_note = "fallback: this server pulls no KV (--role decode or both)";
    return Status::ok();
  }
  engine::CompletionRequest& r = requests[0];
  const int64_t table_tokens = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  const engine::ImportOutcome out = pd->import(r.prompt, r.cache_salt, *params, table_tokens);
  plan.transfer_note = out.imported ? "pulled " + std::to_string(out.blocks_pulled) + " blocks, " +
                                          std::to_string(out.bytes) + " bytes over " + out.transports
                                    : "fallback: " + out.reason;
  plan.imported = r.adopt_kv = out.sequence;  // the request computes only the last prompt token
  return Status::ok();
}

void HttpServer::lend_and_reply(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                                std::shared_ptr<RequestStream> stream, std::vector<engine::RequestId> ids,
                                const PdPlan& plan) {
  const http::ConnectionProbe probe(req.remote_addr, req.remote_port, req.local_addr, req.local_port);
  ResponseBuilder builder(meta_for(api), static_cast<int>(ids.size()) * api.n, engine_.tokenizer());
  while (true) {
    stream->wait(config_.poll_interval_s);
    for (const ChoiceEvent& e : stream->take()) builder.add(e);
    if (stream->finished()) break;
    if (!probe.alive()) {
      for (engine::RequestId id : ids) engine_.abort(id);
      // It may have ended (and parked its KV) before the abort came: once it has finished
      // either way, nothing parks any more and what did is freed.
      while (!stream->finished()) stream->wait(config_.poll_interval_s);
      config_.pd->drop_parked(ids[0]);
      res.status = 499;
      return;
    }
  }
  for (const ChoiceEvent& e : stream->take()) builder.add(e);
  const Status status = stream->status();
  if (!status.is_ok()) {
    config_.pd->drop_parked(ids[0]);
    return reply_error(res, status);
  }
  const transfer::KvTransferParams params = config_.pd->lend(plan.prompt, plan.cache_salt, ids[0]);
  json body = json::parse(builder.body(stream->usage()));
  body["kv_transfer_params"] = json::parse(transfer::kv_transfer_params_json(params));
  res.set_content(body.dump(), "application/json");
}

void HttpServer::pd_routes(httplib::Server& http) {
  http.Get("/v1/pd/stats", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authenticate(req, res).ok) return;
    const engine::ServingMetrics m = engine_.metrics();
    json j{{"role", config_.pd != nullptr ? engine::pd_role_name(config_.pd->role()) : "both"},
           {"kv_blocks_in_use", m.kv_blocks_in_use},
           {"running", m.running},
           {"waiting", m.waiting}};
    if (config_.pd != nullptr) {
      const engine::PdStats s = config_.pd->stats();
      j["transfer_port"] = config_.pd->transfer_port();
      j["leases_held"] = s.leases.held;
      j["leases_active"] = s.leases.active;
      j["leases_granted"] = s.leases.granted;
      j["leases_confirmed"] = s.leases.confirmed;
      j["leases_expired"] = s.leases.expired;
      j["leases_refused"] = s.leases.refused;
      j["lent_blocks"] = s.lent_blocks;
      j["imports_ok"] = s.imports_ok;
      j["imports_fallback"] = s.imports_fallback;
      j["imported_blocks"] = s.imported_blocks;
      j["imported_bytes"] = s.imported_bytes;
      j["local_hit_blocks"] = s.local_hit_blocks;
      j["transfer_seconds"] = s.transfer_seconds;
      j["last_fallback"] = s.last_fallback;
      j["last_transports"] = s.last_transports;
    } else {
      j["leases_held"] = 0;
      j["leases_active"] = 0;
    }
    res.set_content(j.dump(), "application/json");
  });
}

}  // namespace pagoda::server
