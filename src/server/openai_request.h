// OpenAI request bodies (POST /v1/completions, /v1/chat/completions) -> a validated ApiRequest.
//
// Rules: the body is one JSON object (UTF-8; ill-formed UTF-8 is an error). Known fields are
// checked for type and range; null means "not given"; unknown fields are ignored (clients send
// many). Fields that would change the output but are not implemented (echo, suffix, best_of !=
// n, tools on completions) are errors rather than silently ignored.
// logit_bias, presence_penalty and frequency_penalty are OpenAI's (engine/sampler.h). Every error is kInvalidArgument (HTTP 400) and names the
// offending field through `param`.
//
// Defaults follow OpenAI: temperature 1, top_p 1 (top_k, min_p off), n 1, max_tokens 16 for
// completions and "until the context is full" for chat. The seed is left unset when not given
// (the server draws one).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/sampler.h"
#include "kvcache/kv_select.h"
#include "model/text/chat_template.h"
#include "model/text/chat_tools.h"

namespace pagoda::server {

// Chat templates are the model's (model/text/chat_template.h); the server names them as its own.
using model::chat_family_from_name;
using model::chat_family_name;
using model::chat_family_names;
using model::ChatFamily;
using model::ChatMessage;
using model::ChatTemplate;
using model::detect_chat_template;

// One completions prompt: text (tokenized by the server) or token ids used as given.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

// How a reply is constrained: text (free), json_object (any JSON object), json_schema
// (reply_schema) from response_format; a GBNF grammar (`grammar`, `guided_grammar`,
// `structured_outputs.grammar`), a regular expression the whole reply matches (`guided_regex`,
// `structured_outputs.regex`) or one of a list of texts (`guided_choice`,
// `structured_outputs.choice`), in reply_constraint / reply_choices. All but text are enforced
// by constrained decoding (structured/, server/grammar_constraint.h); one per request.
enum class ResponseFormat { kText, kJsonObject, kJsonSchema, kGrammar, kRegex, kChoice };

// tool_choice: auto (the model decides), none (no calls parsed; tools still listed in the
// prompt, as OpenAI), required (a call is forced), a named function (that call is forced).
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ApiRequest {
  bool chat = false;
  std::string model;                    // "" when omitted
  std::vector<PromptInput> prompts;     // completions: one or more (choices per prompt)
  std::vector<ChatMessage> messages;    // chat
  std::vector<model::ChatTool> tools;   // chat: offered tools (model/text/chat_tools.h)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;         // kNamed: one of tools
  bool parallel_tool_calls = true;      // false: only a reply's first call is returned
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking
  std::string reasoning_effort;         // "" when not given (no template here takes one)
  ResponseFormat response_format = ResponseFormat::kText;
  nlohmann::ordered_json reply_schema;  // kJsonSchema: the schema, in the client's key order
  std::string reply_constraint;         // kGrammar: GBNF text; kRegex: the pattern
  std::vector<std::string> reply_choices;  // kChoice: the texts a reply may be
  std::string reply_constraint_param;   // kGrammar, kRegex, kChoice: the field that gave it
  int64_t max_tokens = 16;              // per choice
  bool max_tokens_given = false;
  engine::SamplingParams sampling;      // OpenAI defaults; seed valid when has_seed
  bool has_seed = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int n = 1;                            // choices per prompt
  int logprobs = -1;                    // -1: none; k >= 0: the chosen token's + top k
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  int32_t priority = 0;
  std::string cache_salt;
  // kv_select: {"method": "h2o" | "snapkv" | "off", "budget": N, "recent": R, "observe": W}
  // (kvcache/kv_select.h; unset fields get its defaults). nullopt: the server's --kv-select.
  // Checked here for its own values; the engine checks it against the model (windows, MLA,
  // int4 KV, the context) at submit, also a 400.
  std::optional<kvcache::KvSelectParams> kv_select;
};

// tool_choice required or a named function, with tools offered: the reply is a forced call.
inline bool forces_tool_call(const ApiRequest& r) {
  return r.chat && !r.tools.empty() && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed);
}

struct RequestLimits {
  int32_t vocab_size = 0;               // token ids in prompts and stop_token_ids must be below
  int64_t max_context = 0;              // max_tokens above it can never be produced: an error
  int max_choices = 16;                 // n x number of prompts
  int64_t max_total_tokens = 1 << 20;   // explicit n x prompts x max_tokens above it: an error
  size_t max_stop = 16;                 // stop strings, and stop token ids
  int max_logprobs = 20;
  int max_logit_bias = 300;             // logit_bias entries (OpenAI's limit too)
};

// On error, *param (when non-null) names the field ("temperature", "messages[1].content").
Result<ApiRequest> parse_completion_request(std::string_view body, const RequestLimits& limits,
                                            std::string* param = nullptr);
Result<ApiRequest> parse_chat_request(std::string_view body, const RequestLimits& limits,
                                      std::string* param = nullptr);

}  // namespace pagoda::server
