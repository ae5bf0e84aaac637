#include "server/openai_response.h"

namespace pagoda::server {

using nlohmann::json;

const char* finish_reason_text(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kAborted: return "abort";
  }
  return "stop";
}

// OpenAI's tool_calls array; streamed deltas carry each call's index in the reply.
json tool_calls_json(std::span<const model::ChatToolCall> calls, size_t first_index, bool with_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", calls[i].id}, {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) call["index"] = first_index + i;
    out.push_back(std::move(call));
  }
  return out;
}

json usage_json(const engine::RequestUsage& usage) {
  json details = {{"cached_tokens", usage.cached_tokens}};
  if (usage.num_cached_sources > 0) {  // extension: where the cached tokens came from
    json by_tier = json::object();
    for (int i = 0; i < usage.num_cached_sources; ++i) {
      const engine::TierTokens& t = usage.cached_by_tier[static_cast<size_t>(i)];
      by_tier[std::string(t.tier)] = t.tokens;
    }
    details["cached_tokens_by_tier"] = std::move(by_tier);
  }
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", std::move(details)}};
}

ResponseBuilder::ResponseBuilder(ResponseMeta meta, int num_choices, const model::Tokenizer& tokenizer)
    : meta_(std::move(meta)), tokenizer_(&tokenizer), choices_(static_cast<size_t>(num_choices)) {
  const bool parsed = meta_.chat && (meta_.tool_syntax != model::ToolSyntax::kNone || meta_.reasoning != model::ReasoningSyntax::kNone);
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (parsed) {
      // Call ids: the response id's tail and the choice, so they are unique within the reply.
      const std::string tail = meta_.id.size() > 8 ? meta_.id.substr(meta_.id.size() - 8) : meta_.id;
      c.parser = std::make_unique<model::ChatOutputParser>(meta_.tool_syntax, meta_.reasoning, tail + "_" + std::to_string(i));
      model::ChatDelta primed;  // the forced start is the model's text, never shown again
      c.parser->push(meta_.forced_prefix, primed);
    }
    if (meta_.logprobs < 0) continue;
    if (meta_.logprobs < 0) continue;
    c.logprobs = meta_.chat ? json{{"content", json::array()}}
                            : json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                                   {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  }
}

// The logprobs of the event's tokens, in the endpoint's shape; advances the choice's offset.
json ResponseBuilder::logprobs_of(Choice& choice, const ChoiceEvent& event) const {
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
  };
  if (meta_.chat) {
    json content = json::array();
    for (const engine::TokenEvent& t : event.tokens) {
      const std::string piece = tokenizer_->token_to_piece(t.chosen.token);
      json top = json::array();
      for (const engine::TokenLogprob& alt : t.top) {
        const std::string p = tokenizer_->token_to_piece(alt.token);
        top.push_back({{"token", p}, {"logprob", alt.logprob}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", piece}, {"logprob", t.chosen.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const engine::TokenEvent& t : event.tokens) {
    const std::string piece = tokenizer_->token_to_piece(t.chosen.token);
    json top = json::object();
    for (const engine::TokenLogprob& alt : t.top) top[tokenizer_->token_to_piece(alt.token)] = alt.logprob;
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(t.chosen.logprob);
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(choice.text_offset);
    choice.text_offset += static_cast<int64_t>(piece.size());
  }
  return out;
}

void ResponseBuilder::parse(Choice& c, const ChoiceEvent& event, model::ChatDelta& delta) {
  size_t released = 0;  // event.text is its tokens' texts, then (at the end) the held-back rest
  for (const engine::TokenEvent& t : event.tokens) {
    const bool before = c.parser->in_reasoning();
    if (meta_.marker_token >= 0 && t.token == meta_.marker_token) c.parser->push(meta_.marker_text, delta);
    c.parser->push(t.text, delta);
    released += t.text.size();
    if (before || c.parser->in_reasoning()) ++c.reasoning_tokens;
  }
  if (released < event.text.size()) c.parser->push(std::string_view(event.text).substr(released), delta);
  if (event.end) c.parser->finish(delta);
}

void ResponseBuilder::keep_calls(Choice& c, std::vector<model::ChatToolCall>& calls) const {
  for (model::ChatToolCall& call : calls) {
    if (!meta_.parallel_tool_calls && !c.calls.empty()) break;
    c.calls.push_back(std::move(call));
  }
}

const char* ResponseBuilder::finish_text(const Choice& c, engine::FinishReason reason) const {
  if (reason == engine::FinishReason::kStop && !c.calls.empty()) return "tool_calls";
  return finish_reason_text(reason);
}

int64_t ResponseBuilder::reasoning_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.reasoning_tokens;
  return n;
}

void ResponseBuilder::add(const ChoiceEvent& event) {
  Choice& c = choices_.at(static_cast<size_t>(event.choice));
  if (c.parser) {
    model::ChatDelta delta;
    parse(c, event, delta);
    c.text += delta.content;
    c.reasoning += delta.reasoning;
    keep_calls(c, delta.calls);
  } else {
    c.text += event.text;
  }
  if (event.end) c.reason = event.reason;
  if (meta_.logprobs < 0 || event.tokens.empty()) return;
  json lp = logprobs_of(c, event);
  for (auto& [key, values] : lp.items()) {
    for (json& v : values) c.logprobs[key].push_back(std::move(v));
  }
}

std::string ResponseBuilder::body(const engine::RequestUsage& usage) const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i}, {"logprobs", c.logprobs.is_null() ? json(nullptr) : c.logprobs},
                   {"finish_reason", c.reason ? json(finish_text(c, *c.reason)) : json(nullptr)}};
    if (meta_.chat) {
      json message = {{"role", "assistant"}, {"content", c.text.empty() && !c.calls.empty() ? json(nullptr) : json(c.text)}};
      if (meta_.reasoning != model::ReasoningSyntax::kNone) {
        message["reasoning_content"] = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
      }
      if (!c.calls.empty()) message["tool_calls"] = tool_calls_json(c.calls, 0, /*with_index=*/false);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choices.push_back(std::move(choice));
  }
  json body = {{"id", meta_.id}, {"object", meta_.chat ? "chat.completion" : "text_completion"},
               {"created", meta_.created}, {"model", meta_.model}, {"choices", choices},
               {"usage", usage_json(usage)}};
  if (meta_.reasoning != model::ReasoningSyntax::kNone) {
    body["usage"]["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens()}};
  }
  return dump(body);
}

json ResponseBuilder::chunk_object() const {
  json chunk = {{"id", meta_.id}, {"object", meta_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", meta_.created}, {"model", meta_.model}};
  if (meta_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

std::string ResponseBuilder::chunk(const ChoiceEvent& event) {
  Choice& c = choices_.at(static_cast<size_t>(event.choice));
  const bool wants_logprobs = meta_.logprobs >= 0 && !event.tokens.empty();
  std::string out;
  if (meta_.chat && !c.role_sent) {  // the first chunk of a chat choice names the role
    c.role_sent = true;
    json first = chunk_object();
    first["choices"] = json::array({{{"index", event.choice}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr}, {"finish_reason", nullptr}}});
    out += "data: " + dump(first) + "\n\n";
  }
  json delta_json = json::object();
  if (c.parser) {
    model::ChatDelta delta;
    parse(c, event, delta);
    const size_t first_call = c.calls.size();
    keep_calls(c, delta.calls);
    if (!delta.reasoning.empty()) delta_json["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty()) delta_json["content"] = delta.content;
    if (c.calls.size() > first_call) {
      delta_json["tool_calls"] = tool_calls_json(std::span(c.calls).subspan(first_call), first_call, /*with_index=*/true);
    }
    if (delta_json.empty() && !wants_logprobs && !event.end) return out;
  } else {
    if (event.text.empty() && !wants_logprobs && !event.end) return out;
    if (!event.text.empty()) delta_json["content"] = event.text;
  }
  json choice = {{"index", event.choice}, {"logprobs", wants_logprobs ? logprobs_of(c, event) : json(nullptr)},
                 {"finish_reason", event.end ? json(finish_text(c, event.reason)) : json(nullptr)}};
  if (meta_.chat) {
    choice["delta"] = std::move(delta_json);
  } else {
    choice["text"] = event.text;
  }
  json chunk = chunk_object();
  chunk["choices"] = json::array({choice});
  out += "data: " + dump(chunk) + "\n\n";
  return out;
}

std::string ResponseBuilder::usage_chunk(const engine::RequestUsage& usage) const {
  json chunk = chunk_object();
  chunk["choices"] = json::array();
  chunk["usage"] = usage_json(usage);
  if (meta_.reasoning != model::ReasoningSyntax::kNone) {
    chunk["usage"]["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens()}};
  }
  return "data: " + dump(chunk) + "\n\n";
}

}  // namespace pagoda::server
