// POST /v1/completions and /v1/chat/completions: parse, tokenize, submit, wait or stream.
#include <httplib.h>

#include "model/text/prompt_tokens.h"
#include "server/grammar_constraint.h"
#include "server/http/auth.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "server/http/connection.h"
#include "server/http_server.h"

namespace pagoda::server {

namespace {

void abort_all(engine::ServingEngine& engine, const std::vector<engine::RequestId>& ids) {
  for (engine::RequestId id : ids) engine.abort(id);
}

}  // namespace

// tool_choice required / named: the reply starts inside a call, so a call it is (and, named,
// that call): the opening of the template's call syntax ends the prompt. A think template
// gets an empty think block first (no reasoning before a forced call).
// DeepSeek's template thinks only when asked; its thinking prompt already opens the block.
std::string HttpServer::forced_reply_start(const ApiRequest& api) const {
  if (!forces_tool_call(api)) return "";
  std::string out;
  const bool deepseek = chat_template_.family() == model::ChatFamily::kDeepSeek;
  if (chat_template_.reasoning_syntax() == model::ReasoningSyntax::kThink) {
    if (deepseek && api.enable_thinking == true) out += "</think>";
    if (!deepseek && api.enable_thinking != false) out += "<think>\n\n</think>\n\n";
  }
  const bool named = api.tool_choice == ToolChoice::kNamed;
  switch (chat_template_.tool_syntax()) {
    case model::ToolSyntax::kHermes:
      return out + "<tool_call>\n{\"name\": \"" + (named ? api.tool_choice_name + "\", \"arguments\": " : "");
    case model::ToolSyntax::kLlama3:
      return out + "{\"name\": \"" + (named ? api.tool_choice_name + "\", \"parameters\": " : "");
    case model::ToolSyntax::kDeepSeek:
      return out + "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + (named ? api.tool_choice_name + "<｜tool▁sep｜>" : "");
    default: return out;  // refused in chat_prompt
  }
}

Result<std::vector<int32_t>> HttpServer::chat_prompt(const ApiRequest& api) const {
  if (!api.reasoning_effort.empty()) {
    return Status::invalid_argument("reasoning_effort: this model's chat template takes none (Pagoda renders no harmony template)");
  }
  model::ChatRenderOptions options;
  options.tools = &api.tools;
  options.enable_thinking = api.enable_thinking;
  options.assistant_prefix = forced_reply_start(api);
  return model::encode_chat(engine_.tokenizer(), chat_template_, api.messages, options);
}

Result<std::vector<int32_t>> HttpServer::text_prompt(const PromptInput& p) const {
  if (p.is_tokens) return p.tokens;
  return model::encode_prompt(engine_.tokenizer(), p.text);
}

// The grammar of a constrained reply (ResponseFormat), compiled once per kind and text and
// shared by every request that sends it (with its mask cache); the vocabulary trie is built on
// first use. A compile error names the field the client used.
Result<std::shared_ptr<structured::CompiledGrammar>> HttpServer::reply_grammar(const ApiRequest& api) {
  std::shared_ptr<const structured::TokenIndex> index = vocabulary_index();
  std::string key;
  switch (api.response_format) {
    case ResponseFormat::kJsonObject: key = "json_object"; break;
    case ResponseFormat::kJsonSchema: key = "json_schema " + api.reply_schema.dump(); break;
    case ResponseFormat::kGrammar: key = "gbnf " + api.reply_constraint; break;
    case ResponseFormat::kRegex: key = "regex " + api.reply_constraint; break;
    case ResponseFormat::kChoice: key = "choice " + nlohmann::json(api.reply_choices).dump(); break;
    case ResponseFormat::kText: return Status::invalid_argument("response_format: text is not a constraint");
  }
  return grammars_.get(key, [&]() -> Result<std::shared_ptr<structured::CompiledGrammar>> {
    Result<structured::Grammar> g = structured::Grammar{};
    switch (api.response_format) {
      case ResponseFormat::kJsonObject: g = structured::json_object_grammar(); break;
      case ResponseFormat::kJsonSchema: g = structured::grammar_from_json_schema(api.reply_schema); break;
      case ResponseFormat::kGrammar: g = structured::grammar_from_gbnf(api.reply_constraint); break;
      case ResponseFormat::kRegex: g = structured::grammar_from_regex(api.reply_constraint); break;
      default: g = structured::choice_grammar(api.reply_choices);
    }
    if (!g.is_ok()) {
      std::string m = g.status().message();
      for (const char* prefix : {"grammar: ", "regex: "}) {
        if (m.starts_with(prefix)) m.erase(0, std::char_traits<char>::length(prefix));
      }
      const std::string param = api.reply_constraint_param.empty() ? "response_format" : api.reply_constraint_param;
      return Status::invalid_argument(param + ": " + m);
    }
    return std::make_shared<structured::CompiledGrammar>(std::move(g).value(), index);
  });
}

// tool_choice required / named: after the forced opening (forced_reply_start), the rest of the
// call is constrained too: the name (required: any tool's), its arguments by the tool's
// parameters schema, and the syntax's closing.
Result<std::shared_ptr<structured::CompiledGrammar>> HttpServer::call_grammar(const ApiRequest& api) {
  const model::ToolSyntax syntax = chat_template_.tool_syntax();
  const bool hermes = syntax == model::ToolSyntax::kHermes, deepseek = syntax == model::ToolSyntax::kDeepSeek;
  const std::string args_key = hermes ? "arguments" : "parameters";
  const std::string trail = hermes ? "}\n</tool_call>" : deepseek ? "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" : "}";
  std::vector<structured::CallShape> calls;
  std::string key = std::string("call ") + model::tool_syntax_name(chat_template_.tool_syntax());
  for (size_t i = 0; i < api.tools.size(); ++i) {
    const model::ChatTool& t = api.tools[i];
    if (api.tool_choice == ToolChoice::kNamed && t.name != api.tool_choice_name) continue;
    const nlohmann::ordered_json& fn = t.spec["function"];
    structured::CallShape shape;
    shape.lead = api.tool_choice == ToolChoice::kNamed ? ""
                 : deepseek                              ? t.name + "<｜tool▁sep｜>"
                                                         : t.name + "\", \"" + args_key + "\": ";
    shape.arguments_schema = fn.contains("parameters") && fn["parameters"].is_object()
                                 ? fn["parameters"]
                                 : nlohmann::ordered_json{{"type", "object"}};
    key += " " + shape.lead + shape.arguments_schema.dump();
    calls.push_back(std::move(shape));
  }
  std::shared_ptr<const structured::TokenIndex> index = vocabulary_index();
  return grammars_.get(key, [&]() -> Result<std::shared_ptr<structured::CompiledGrammar>> {
    auto g = structured::call_grammar(calls, trail);
    if (!g.is_ok()) return Status::invalid_argument("tools: a parameters schema: " + g.status().message());
    return std::make_shared<structured::CompiledGrammar>(std::move(g).value(), index);
  });
}

std::shared_ptr<const structured::TokenIndex> HttpServer::vocabulary_index() {
  std::lock_guard lock(token_index_mutex_);
  if (!token_index_) {
    const model::Tokenizer& tok = engine_.tokenizer();
    std::vector<std::string> pieces(static_cast<size_t>(tok.vocab_size()));
    for (int32_t t = 0; t < tok.vocab_size(); ++t) pieces[static_cast<size_t>(t)] = tok.token_to_piece(t);
    token_index_ = std::make_shared<const structured::TokenIndex>(pieces);
  }
  return token_index_;
}

std::string HttpServer::cache_salt_for(const ApiRequest& api, const Caller& caller) const {
  // Salted per key: tenants never share cache entries, whatever salt they send.
  return http::tenant_cache_salt(config_.salt_per_api_key, caller.api_key, api.cache_salt);
}

Result<std::vector<engine::CompletionRequest>> HttpServer::engine_requests(const ApiRequest& api, const Caller& caller) {
  std::vector<std::vector<int32_t>> prompts;
  if (api.chat) {
    PAGODA_ASSIGN_OR_RETURN(std::vector<int32_t> ids, chat_prompt(api));
    prompts.push_back(std::move(ids));
  } else {
    for (const PromptInput& p : api.prompts) {
      PAGODA_ASSIGN_OR_RETURN(std::vector<int32_t> ids, text_prompt(p));
      prompts.push_back(std::move(ids));
    }
  }
  std::shared_ptr<structured::CompiledGrammar> grammar;
  const bool forced_call = forces_tool_call(api);
  if (api.response_format != ResponseFormat::kText) {
    if (forced_call) {
      const std::string param = api.reply_constraint_param.empty() ? "response_format" : api.reply_constraint_param;
      return Status::invalid_argument(param + ": a forced tool call (tool_choice) already constrains the reply");
    }
    PAGODA_ASSIGN_OR_RETURN(grammar, reply_grammar(api));
  } else if (forced_call) {
    PAGODA_ASSIGN_OR_RETURN(grammar, call_grammar(api));
  }
  const uint64_t seed = api.has_seed ? api.sampling.seed : draw_seed();
  std::vector<engine::CompletionRequest> out;
  for (std::vector<int32_t>& prompt : prompts) {
    if (prompt.empty()) return Status::invalid_argument("prompt: the prompt is empty (no tokens)");
    engine::CompletionRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = api.max_tokens;
    r.sampling = api.sampling;
    r.sampling.seed = seed;
    r.stop = api.stop;
    r.stop_token_ids = api.stop_token_ids;
    r.ignore_eos = api.ignore_eos;
    if (!api.ignore_eos) {
      r.stop_token_ids.insert(r.stop_token_ids.end(), config_.end_of_text_ids.begin(), config_.end_of_text_ids.end());
      if (api.chat) {
        r.stop_token_ids.insert(r.stop_token_ids.end(), end_of_turn_ids_.begin(), end_of_turn_ids_.end());
        r.stop.insert(r.stop.end(), end_of_turn_stops_.begin(), end_of_turn_stops_.end());
      }
    }
    r.n = api.n;
    r.logprobs = api.logprobs;
    r.priority = api.priority;
    r.cache_salt = cache_salt_for(api, caller);
    r.kv_select = api.kv_select;
    if (grammar) r.constraint = std::make_shared<GrammarConstraint>(grammar, r.stop_token_ids);
    out.push_back(std::move(r));
  }
  return out;
}

void HttpServer::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const Caller caller = authenticate(req, res);
  if (!caller.ok) return;
  std::string param;
  Result<ApiRequest> parsed = chat ? parse_chat_request(req.body, config_.limits, &param)
                                   : parse_completion_request(req.body, config_.limits, &param);
  if (!parsed.is_ok()) return reply_error(res, parsed.status(), param);
  ApiRequest& api = parsed.value();
  if (!api.model.empty() && api.model != config_.model_name) {
    return reply_error(res, Status::not_found("The model '" + api.model + "' does not exist (this server serves '" +
                                              config_.model_name + "')"), "model");
  }
  if (draining_) return reply_error(res, Status::unavailable("The server is shutting down"));
  auto requests = engine_requests(api, caller);
  if (!requests.is_ok()) {
    // The field the message starts with ("tools: ...", "response_format: ..."), else the prompt.
    const std::string& m = requests.status().message();
    const size_t colon = m.find(": ");
    const bool named = colon != std::string::npos && m.substr(0, colon).find(' ') == std::string::npos;
    return reply_error(res, requests.status(), named ? m.substr(0, colon) : (chat ? "messages" : "prompt"));
  }
  PdPlan pd;  // P/D disaggregation: lend the prompt's KV after it ran, or pull it first
  if (Status s = prepare_pd(req, api, *requests, pd); !s.is_ok()) return reply_error(res, s, "kv_transfer_params");
  if (!pd.transfer_note.empty()) res.set_header("X-Pagoda-Kv-Transfer", pd.transfer_note);

  auto stream = std::make_shared<RequestStream>(static_cast<int>(requests->size()), api.n);
  std::vector<engine::RequestId> ids;
  for (size_t p = 0; p < requests->size(); ++p) {
    auto id = engine_.submit(std::move((*requests)[p]), stream->observer(static_cast<int>(p)));
    if (!id.is_ok()) {
      if (p == 0 && pd.imported >= 0) config_.pd->release(pd.imported);  // refused: still ours
      abort_all(engine_, ids);
      const bool too_long = id.status().code() == StatusCode::kTooLarge;
      return reply_error(res, id.status(), too_long ? (chat ? "messages" : "prompt") : "");
    }
    ids.push_back(*id);
  }
  // The engine's ids, for GET /v1/kv/requests/{id} while the request runs.
  std::string id_list;
  for (engine::RequestId id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  res.set_header("X-Pagoda-Request-Id", id_list);
  if (pd.lend) return lend_and_reply(req, res, api, std::move(stream), std::move(ids), pd);
  if (api.stream) return stream_reply(req, res, api, std::move(stream), std::move(ids));
  wait_and_reply(req, res, api, std::move(stream), std::move(ids));
}

void HttpServer::wait_and_reply(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                                std::shared_ptr<RequestStream> stream, std::vector<engine::RequestId> ids) {
  const http::ConnectionProbe probe(req.remote_addr, req.remote_port, req.local_addr, req.local_port);
  ResponseBuilder builder(meta_for(api), static_cast<int>(ids.size()) * api.n, engine_.tokenizer());
  while (true) {
    stream->wait(config_.poll_interval_s);
    for (const ChoiceEvent& e : stream->take()) builder.add(e);
    if (stream->finished()) break;
    if (!probe.alive()) {  // one poll() per wake-up: cheap next to a forward pass
      abort_all(engine_, ids);
      logger_.info("client " + req.remote_addr + ":" + std::to_string(req.remote_port) + " went away; request aborted");
      res.status = 499;  // nobody reads it
      return;
    }
  }
  for (const ChoiceEvent& e : stream->take()) builder.add(e);
  const Status status = stream->status();
  if (!status.is_ok()) return reply_error(res, status);
  res.set_content(builder.body(stream->usage()), "application/json");
}

void HttpServer::stream_reply(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                              std::shared_ptr<RequestStream> stream, std::vector<engine::RequestId> ids) {
  struct State {
    std::shared_ptr<RequestStream> stream;
    std::vector<engine::RequestId> ids;
    ResponseBuilder builder;
    http::ConnectionProbe probe;
    bool include_usage;
    bool done = false;
  };
  const int num_choices = static_cast<int>(ids.size()) * api.n;
  auto state = std::make_shared<State>(State{std::move(stream), std::move(ids),
                                             ResponseBuilder(meta_for(api), num_choices, engine_.tokenizer()),
                                             http::ConnectionProbe(req.remote_addr, req.remote_port, req.local_addr, req.local_port),
                                             api.include_usage});
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const double poll = config_.poll_interval_s;
  engine::ServingEngine* engine = &engine_;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state, poll, engine](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
        while (true) {
          const bool woke = state->stream->wait(poll);
          std::string out;
          for (const ChoiceEvent& e : state->stream->take()) out += state->builder.chunk(e);
          const bool finished = state->stream->finished();
          if (finished) {
            for (const ChoiceEvent& e : state->stream->take()) out += state->builder.chunk(e);
            const Status status = state->stream->status();
            if (!status.is_ok()) {  // the headers (200) are gone: the error is an event, as OpenAI sends it
              out += "data: " + error_body(http_status_for(status, draining_), status.message()) + "\n\n";
            }
            if (state->include_usage) out += state->builder.usage_chunk(state->stream->usage());
            out += ResponseBuilder::done_line();
          } else if (!woke && !state->probe.found()) {
            out = ResponseBuilder::keep_alive();  // without a probe, a failed write reveals a gone client
          }
          if (!write(out) || (!finished && !state->probe.alive())) {
            abort_all(*engine, state->ids);
            return false;
          }
          if (finished) {
            state->done = true;
            sink.done();
            return true;
          }
        }
      },
      [state, engine](bool success) {
        if (!state->done) abort_all(*engine, state->ids);  // headers never went out, or the client left
      });
}

}  // namespace pagoda::server
