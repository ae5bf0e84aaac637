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
  for (Choice& c : choices_) {
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

void ResponseBuilder::add(const ChoiceEvent& event) {
  Choice& c = choices_.at(static_cast<size_t>(event.choice));
  c.text += event.text;
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
                   {"finish_reason", c.reason ? json(finish_reason_text(*c.reason)) : json(nullptr)}};
    if (meta_.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choices.push_back(std::move(choice));
  }
  json body = {{"id", meta_.id}, {"object", meta_.chat ? "chat.completion" : "text_completion"},
               {"created", meta_.created}, {"model", meta_.model}, {"choices", choices},
               {"usage", usage_json(usage)}};
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
  if (event.text.empty() && !wants_logprobs && !event.end) return out;
  json choice = {{"index", event.choice}, {"logprobs", wants_logprobs ? logprobs_of(c, event) : json(nullptr)},
                 {"finish_reason", event.end ? json(finish_reason_text(event.reason)) : json(nullptr)}};
  if (meta_.chat) {
    choice["delta"] = event.text.empty() ? json::object() : json{{"content", event.text}};
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
  return "data: " + dump(chunk) + "\n\n";
}

}  // namespace pagoda::server
