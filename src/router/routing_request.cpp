#include "router/routing_request.h"

#include <nlohmann/json.hpp>

#include "model/text/chat_messages.h"
#include "model/text/prompt_tokens.h"
#include "server/http/auth.h"

namespace pagoda::router {

using nlohmann::json;

namespace {

bool read_token_array(const json& a, int32_t vocab_size, std::vector<int32_t>& out) {
  out.clear();
  for (const json& t : a) {
    if (!t.is_number_integer()) return false;
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v >= vocab_size) return false;
    out.push_back(static_cast<int32_t>(v));
  }
  return !out.empty();
}

// prompt: "text" | ["text", ...] | [ids] | [[ids], ...]; the first prompt's tokens.
bool read_prompt(const json& prompt, const model::Tokenizer& tok, RoutingRequest& r) {
  if (prompt.is_string()) {
    r.tokens = model::encode_prompt(tok, prompt.get<std::string>());
    return true;
  }
  if (!prompt.is_array() || prompt.empty()) return false;
  const json& first = prompt[0];
  if (first.is_number_integer()) return read_token_array(prompt, tok.vocab_size(), r.tokens);
  r.num_prompts = static_cast<int64_t>(prompt.size());
  if (first.is_string()) {
    r.tokens = model::encode_prompt(tok, first.get<std::string>());
    return true;
  }
  return first.is_array() && read_token_array(first, tok.vocab_size(), r.tokens);
}

// The chat as the worker renders it: messages, the offered tools (in the client's key order)
// and enable_thinking. A forced call's opening (tool_choice) is left out: a few tokens at the end.
bool read_messages(const json& j, std::string_view body, const model::Tokenizer& tok, const model::ChatTemplate& tmpl,
                   RoutingRequest& r) {
  auto chat = model::chat_messages_from_json(j.value("messages", json()));
  if (!chat.is_ok()) return false;
  model::ChatRenderOptions options;
  std::vector<model::ChatTool> tools;
  if (auto it = j.find("tools"); it != j.end() && it->is_array() && !it->empty()) {
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
    if (!ordered.is_object() || !ordered.contains("tools")) return false;
    auto parsed = model::chat_tools_from_json(ordered["tools"]);
    if (!parsed.is_ok()) return false;
    tools = std::move(parsed).value();
    options.tools = &tools;
  }
  if (auto it = j.find("chat_template_kwargs"); it != j.end() && it->is_object()) {
    if (auto e = it->find("enable_thinking"); e != it->end() && e->is_boolean()) options.enable_thinking = e->get<bool>();
  }
  auto tokens = model::encode_chat(tok, tmpl, *chat, options);
  if (!tokens.is_ok()) return false;
  r.tokens = std::move(tokens).value();
  return true;
}

}  // namespace

std::string RoutingRequest::tenant_salt(bool salt_per_api_key) const {
  return http::tenant_cache_salt(salt_per_api_key, api_key, cache_salt);
}

RoutingRequest read_routing_request(std::string_view body, bool chat, const model::Tokenizer& tokenizer,
                                    const model::ChatTemplate& chat_template, std::string_view api_key) {
  RoutingRequest r;
  r.api_key = std::string(api_key);
  const json j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return r;
  r.stream = j.value("stream", json(false)).is_boolean() && j.value("stream", false);
  const char* max_key = chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto it = j.find(max_key); it != j.end() && it->is_number_integer()) r.max_tokens = it->get<int64_t>();
  const int64_t n = j.value("n", json(1)).is_number_integer() ? j.value("n", int64_t{1}) : 1;
  if (auto it = j.find("cache_salt"); it != j.end() && it->is_string()) r.cache_salt = it->get<std::string>();
  const bool ok = chat ? read_messages(j, body, tokenizer, chat_template, r)
                       : read_prompt(j.value("prompt", json()), tokenizer, r);
  r.num_choices = std::max<int64_t>(1, n) * r.num_prompts;
  r.parsed = ok && !r.tokens.empty();
  if (!r.parsed) r.tokens.clear();
  return r;
}

std::vector<kvcache::BlockHash> prompt_block_hashes(std::span<const int32_t> tokens, int64_t block_size,
                                                    const kvcache::KvNamespace& ns, kvcache::BlockHashFn hash_fn) {
  std::vector<kvcache::BlockHash> out;
  if (tokens.empty() || block_size <= 0) return out;
  const int64_t num_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size;
  out.reserve(static_cast<size_t>(num_blocks));
  const uint64_t key = ns.key();
  kvcache::BlockHash parent = kvcache::kRootBlockHash;
  for (int64_t b = 0; b < num_blocks; ++b) {
    parent = hash_fn(parent, tokens.subspan(static_cast<size_t>(b * block_size), static_cast<size_t>(block_size)), key);
    out.push_back(parent);
  }
  return out;
}

}  // namespace pagoda::router
