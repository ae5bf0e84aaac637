// OpenAI response bodies: completion and chat.completion objects, their streaming chunks (SSE
// `data: {...}\n\n` lines, ended by `data: [DONE]\n\n`), usage, and the error object.
//
// ResponseBuilder folds ChoiceEvents into per-choice text, finish reasons and logprobs (for the
// non-streaming body) or turns each event into a chunk (streaming). Every body and the final
// usage chunk carry usage.prompt_tokens_details.cached_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/serving.h"
#include "model/text/chat_output.h"
#include "model/text/tokenizer.h"
#include "server/http/errors.h"
#include "server/request_stream.h"

namespace pagoda::server {

// Error objects and JSON text are the HTTP plumbing's (shared with the router).
using http::dump;
using http::error_body;
using http::http_status_for;

const char* finish_reason_text(engine::FinishReason reason);  // "stop", "length", "abort"

nlohmann::json usage_json(const engine::RequestUsage& usage);
nlohmann::json tool_calls_json(std::span<const model::ChatToolCall> calls, size_t first_index, bool with_index);

struct ResponseMeta {
  std::string id;          // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;     // Unix seconds
  std::string model;
  bool chat = false;
  int logprobs = -1;       // as requested (-1: none)
  bool include_usage = false;  // streaming: "usage": null on chunks, a final usage chunk
  // Chat replies are split by model::ChatOutputParser into reasoning_content, content and
  // tool_calls (finish_reason "tool_calls" when a reply that stopped made calls).
  model::ToolSyntax tool_syntax = model::ToolSyntax::kNone;        // none: no calls parsed
  model::ReasoningSyntax reasoning = model::ReasoningSyntax::kNone;
  bool parallel_tool_calls = true;  // false: a reply's calls after the first are dropped
  std::string forced_prefix;        // the prompt's end that the reply continues (a forced call)
  int32_t marker_token = -1;        // a control token (rendered as "") that opens calls, and
  std::string marker_text;          // the marker the parser reads for it
};

class ResponseBuilder {
 public:
  ResponseBuilder(ResponseMeta meta, int num_choices, const model::Tokenizer& tokenizer);

  // Non-streaming: fold events, then body().
  void add(const ChoiceEvent& event);
  std::string body(const engine::RequestUsage& usage) const;

  // Streaming: the SSE lines of one event (chat: the first chunk of a choice also carries
  // the assistant role); "" when the event carries nothing to send.
  std::string chunk(const ChoiceEvent& event);
  std::string usage_chunk(const engine::RequestUsage& usage) const;
  static std::string done_line() { return "data: [DONE]\n\n"; }
  // An SSE comment: keeps the connection busy (and reveals a closed one) while nothing happens.
  static std::string keep_alive() { return ":\n\n"; }

 private:
  struct Choice {
    std::string text;                       // content (chat: after the parser)
    std::string reasoning;                  // chat: reasoning_content
    std::vector<model::ChatToolCall> calls; // chat: tool calls
    std::unique_ptr<model::ChatOutputParser> parser;  // chat with tools or reasoning
    int64_t reasoning_tokens = 0;
    std::optional<engine::FinishReason> reason;
    nlohmann::json logprobs;  // chat: {"content": [...]}, completions: {tokens, ...}
    int64_t text_offset = 0;  // completions logprobs: byte offset of the next token
    bool role_sent = false;   // chat streaming
  };
  nlohmann::json logprobs_of(Choice& choice, const ChoiceEvent& event) const;
  nlohmann::json chunk_object() const;
  // Feeds the event's tokens through the choice's parser (finishing it at the end) into delta.
  void parse(Choice& choice, const ChoiceEvent& event, model::ChatDelta& delta);
  void keep_calls(Choice& choice, std::vector<model::ChatToolCall>& calls) const;
  const char* finish_text(const Choice& choice, engine::FinishReason reason) const;
  int64_t reasoning_tokens() const;

  ResponseMeta meta_;
  const model::Tokenizer* tokenizer_;
  std::vector<Choice> choices_;
};

}  // namespace pagoda::server
