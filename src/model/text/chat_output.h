// ChatOutputParser: an assistant reply's text, as it streams, split into reasoning, content and
// tool calls (chat_tools.h names the syntaxes).
//
// States (text is consumed left to right; `pending` holds what cannot be decided yet):
//   start      leading whitespace is held; then "<think>" (kThink reasoning) -> reasoning, a
//              tool opener -> call, anything else -> content
//   reasoning  until "</think>"; the newlines right after it are dropped
//   content    until a tool opener (hermes "<tool_call>", mistral "[TOOL_CALLS]", llama3
//              "<|python_tag|>", deepseek "<｜tool▁calls▁begin｜>"); llama3 also treats a reply
//              that starts with '{' as a call
//   call       hermes: until "</tool_call>", deepseek: until "<｜tool▁calls▁end｜>", then back
//              to content (whitespace between calls is dropped); mistral, llama3: everything to
//              the end of the reply
// A text that could still grow into a marker is held back (never more than the longest marker),
// so streamed content never shows half a marker. A call whose JSON does not parse, or lacks a
// name, comes back as content with its markers, never as a call and never as an error. An
// unterminated <think> is all reasoning; an unterminated hermes call is content, an
// unterminated deepseek block its calls if every one of them closed, else content.
//
// Calls get ids "call_<prefix>_<k>" (k from 0 per reply); arguments are compact JSON text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/chat_tools.h"

namespace pagoda::model {

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ChatToolCall> calls;  // complete calls, in order
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  void clear() {
    reasoning.clear();
    content.clear();
    calls.clear();
  }
};

class ChatOutputParser {
 public:
  ChatOutputParser(ToolSyntax tools, ReasoningSyntax reasoning, std::string id_prefix);

  // Appends what `text` decides to out (out is not cleared).
  void push(std::string_view text, ChatDelta& out);
  // The reply ended: everything held is decided.
  void finish(ChatDelta& out);

  bool in_reasoning() const { return state_ == State::kReasoning; }
  int64_t num_calls() const { return num_calls_; }

 private:
  enum class State { kStart, kReasoning, kContent, kCall, kCallToEnd };
  void run(ChatDelta& out, bool final);
  bool parse_calls(std::string_view payload, std::vector<ChatToolCall>& calls);
  bool add_call(const std::string& name, const std::string& arguments, std::vector<ChatToolCall>& calls);
  // The openers that apply in content; the first found at or after `from`.
  size_t find_opener(std::string_view text, size_t& length) const;

  ToolSyntax tools_;
  ReasoningSyntax reasoning_;
  std::string id_prefix_;
  State state_ = State::kStart;
  std::string pending_;      // undecided text
  std::string opener_;       // the marker that opened the current call
  bool after_call_ = false;  // content after a hermes call: whitespace is dropped
  bool skip_newlines_ = false;  // right after </think>
  int64_t num_calls_ = 0;
};

}  // namespace pagoda::model
