#include "model/text/chat_output.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

namespace pagoda::model {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kDeepSeekOpen = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekClose = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest proper suffix of text that is a prefix of marker (held back: the
// next text may complete the marker).
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// A call object's arguments as compact JSON text: an object, or a string holding one.
bool arguments_text(const ojson& call, const char* key, std::string& out) {
  auto it = call.find(key);
  if (it == call.end() || it->is_null()) {
    out = "{}";
    return true;
  }
  if (it->is_object()) {
    out = it->dump();
    return true;
  }
  if (it->is_string()) {
    const ojson parsed = ojson::parse(it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return false;
    out = parsed.dump();
    return true;
  }
  return false;
}

}  // namespace

ChatOutputParser::ChatOutputParser(ToolSyntax tools, ReasoningSyntax reasoning, std::string id_prefix)
    : tools_(tools), reasoning_(reasoning), id_prefix_(std::move(id_prefix)) {}

void ChatOutputParser::push(std::string_view text, ChatDelta& out) {
  pending_.append(text);
  run(out, /*final=*/false);
}

void ChatOutputParser::finish(ChatDelta& out) { run(out, /*final=*/true); }

size_t ChatOutputParser::find_opener(std::string_view text, size_t& length) const {
  std::string_view opener;
  switch (tools_) {
    case ToolSyntax::kHermes: opener = kHermesOpen; break;
    case ToolSyntax::kMistral: opener = kMistralOpen; break;
    case ToolSyntax::kLlama3: opener = kPythonTag; break;
    case ToolSyntax::kDeepSeek: opener = kDeepSeekOpen; break;
    case ToolSyntax::kNone: return std::string_view::npos;
  }
  length = opener.size();
  const size_t at = text.find(opener);
  if (at != std::string_view::npos) return at;
  length = partial_marker(text, opener);  // held back, not found
  return std::string_view::npos;
}

bool ChatOutputParser::add_call(const std::string& name, const std::string& arguments, std::vector<ChatToolCall>& calls) {
  if (name.empty()) return false;
  calls.push_back({"call_" + id_prefix_ + "_" + std::to_string(num_calls_ + static_cast<int64_t>(calls.size())), name, arguments});
  return true;
}

// All or nothing: on failure `calls` is unchanged.
bool ChatOutputParser::parse_calls(std::string_view payload, std::vector<ChatToolCall>& calls) {
  std::vector<ChatToolCall> found;
  auto one = [&](const ojson& call, const char* args_key) {
    if (!call.is_object()) return false;
    auto name = call.find("name");
    if (name == call.end() || !name->is_string()) return false;
    std::string args;
    if (!arguments_text(call, args_key, args)) return false;
    return add_call(name->get<std::string>(), args, found);
  };
  payload = trim(payload);
  switch (tools_) {
    case ToolSyntax::kHermes: {
      const ojson v = ojson::parse(payload, nullptr, false);
      if (!one(v, "arguments")) return false;
      break;
    }
    case ToolSyntax::kMistral: {
      const ojson v = ojson::parse(payload, nullptr, false);
      if (v.is_array() && !v.empty()) {
        for (const ojson& c : v) {
          if (!one(c, "arguments")) return false;
        }
      } else if (!one(v, "arguments")) {
        return false;
      }
      break;
    }
    case ToolSyntax::kLlama3: {
      // One object, or several separated by ';' (Llama 3.1's parallel form).
      size_t begin = 0;
      while (begin < payload.size()) {
        size_t end = payload.size();
        ojson v = ojson::parse(payload.substr(begin), nullptr, false);
        if (v.is_discarded()) {
          end = payload.find(';', begin);
          while (end != std::string_view::npos) {
            v = ojson::parse(payload.substr(begin, end - begin), nullptr, false);
            if (!v.is_discarded()) break;
            end = payload.find(';', end + 1);
          }
          if (end == std::string_view::npos) return false;
        }
        if (!one(v, v.is_object() && v.contains("parameters") ? "parameters" : "arguments")) return false;
        begin = end == payload.size() ? end : end + 1;
        while (begin < payload.size() && is_space(payload[begin])) ++begin;
      }
      if (found.empty()) return false;
      break;
    }
    case ToolSyntax::kDeepSeek: {
      // <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{args}<｜tool▁call▁end｜>, repeated (V3.1), or
      // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{args}\n```<｜tool▁call▁end｜> (V3, R1).
      while (!payload.empty()) {
        if (payload.substr(0, kDeepSeekCallBegin.size()) != kDeepSeekCallBegin) return false;
        payload.remove_prefix(kDeepSeekCallBegin.size());
        const size_t sep = payload.find(kDeepSeekSep), end = payload.find(kDeepSeekCallEnd);
        if (sep == std::string_view::npos || end == std::string_view::npos || sep > end) return false;
        std::string_view name = trim(payload.substr(0, sep));
        std::string_view body = trim(payload.substr(sep + kDeepSeekSep.size(), end - sep - kDeepSeekSep.size()));
        payload = trim(payload.substr(end + kDeepSeekCallEnd.size()));
        if (name == "function") {
          const size_t nl = body.find('\n');
          if (nl == std::string_view::npos) return false;
          name = trim(body.substr(0, nl));
          body = trim(body.substr(nl + 1));
          if (body.substr(0, 7) == "```json") body.remove_prefix(7);
          if (body.size() >= 3 && body.substr(body.size() - 3) == "```") body.remove_suffix(3);
          body = trim(body);
        }
        const ojson args = ojson::parse(body, nullptr, false);
        if (!args.is_object() || !add_call(std::string(name), args.dump(), found)) return false;
      }
      if (found.empty()) return false;
      break;
    }
    case ToolSyntax::kNone: return false;
  }
  num_calls_ += static_cast<int64_t>(found.size());
  for (ChatToolCall& c : found) calls.push_back(std::move(c));
  return true;
}

void ChatOutputParser::run(ChatDelta& out, bool final) {
  while (true) {
    switch (state_) {
      case State::kStart: {
        size_t i = 0;
        while (i < pending_.size() && is_space(pending_[i])) ++i;
        if (i == pending_.size()) {
          if (final) {
            out.content += pending_;
            pending_.clear();
          }
          return;
        }
        const std::string_view rest = std::string_view(pending_).substr(i);
        if (reasoning_ == ReasoningSyntax::kThink) {
          if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
            pending_.erase(0, i + kThinkOpen.size());
            state_ = State::kReasoning;
            continue;
          }
          if (!final && kThinkOpen.substr(0, rest.size()) == rest) return;  // may become <think>
        }
        size_t opener_length = 0;
        const size_t opener_at = find_opener(rest, opener_length);
        if (opener_at == std::string_view::npos && opener_length == rest.size() && !final) return;  // may become one
        const bool json_call = tools_ == ToolSyntax::kLlama3 && rest.front() == '{';
        if (opener_at == 0 || json_call) pending_.erase(0, i);  // no whitespace content before a first call
        if (json_call) {
          opener_.clear();
          state_ = State::kCallToEnd;
          continue;
        }
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t at = pending_.find(kThinkClose);
        if (at != std::string::npos) {
          out.reasoning.append(pending_, 0, at);
          pending_.erase(0, at + kThinkClose.size());
          state_ = State::kContent;
          skip_newlines_ = true;
          continue;
        }
        const size_t keep = final ? 0 : partial_marker(pending_, kThinkClose);
        out.reasoning.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kContent: {
        if (skip_newlines_ || after_call_) {
          size_t i = 0;
          while (i < pending_.size() && (after_call_ ? is_space(pending_[i]) : pending_[i] == '\n')) ++i;
          pending_.erase(0, i);
          if (pending_.empty()) return;
          skip_newlines_ = after_call_ = false;
        }
        size_t length = 0;
        const size_t at = find_opener(pending_, length);
        if (at != std::string::npos) {
          out.content.append(pending_, 0, at);
          opener_ = pending_.substr(at, length);
          pending_.erase(0, at + length);
          state_ = tools_ == ToolSyntax::kHermes || tools_ == ToolSyntax::kDeepSeek ? State::kCall : State::kCallToEnd;
          continue;
        }
        const size_t keep = final ? 0 : length;
        out.content.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kCall: {
        const std::string_view close = tools_ == ToolSyntax::kDeepSeek ? kDeepSeekClose : kHermesClose;
        const size_t at = pending_.find(close);
        if (at != std::string::npos) {
          const std::string payload = pending_.substr(0, at);
          if (parse_calls(payload, out.calls)) {
            after_call_ = true;
          } else {
            out.content += opener_ + payload + std::string(close);
          }
          pending_.erase(0, at + close.size());
          state_ = State::kContent;
          continue;
        }
        if (final) {
          // Unterminated: text, as written (a deepseek block whose calls all closed is kept:
          // the end-of-sentence token may stop the reply before <｜tool▁calls▁end｜>).
          if (tools_ != ToolSyntax::kDeepSeek || !parse_calls(pending_, out.calls)) out.content += opener_ + pending_;
          pending_.clear();
        }
        return;
      }
      case State::kCallToEnd: {
        if (!final) return;
        if (!parse_calls(pending_, out.calls)) out.content += opener_ + pending_;
        pending_.clear();
        return;
      }
    }
  }
}

}  // namespace pagoda::model
