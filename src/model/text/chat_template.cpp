#include "model/text/chat_template.h"

#include <array>
#include <utility>

namespace pagoda::model {

namespace {

constexpr std::array<std::pair<ChatFamily, const char*>, 7> kNames = {{
    {ChatFamily::kLlama2, "llama2"},
    {ChatFamily::kLlama3, "llama3"},
    {ChatFamily::kChatML, "chatml"},
    {ChatFamily::kMistral, "mistral"},
    {ChatFamily::kZephyr, "zephyr"},
    {ChatFamily::kGemma, "gemma"},
    {ChatFamily::kDeepSeek, "deepseek"},
}};

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }


// Splits an optional leading system message off and checks that the rest alternates
// user/assistant starting with user (the families whose reference templates raise otherwise).
Status split_alternating(const std::vector<ChatMessage>& messages, const ChatMessage*& system,
                         std::vector<const ChatMessage*>& turns) {
  system = nullptr;
  turns.clear();
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = &messages[0];
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const bool want_user = (i - first) % 2 == 0;
    const std::string& role = messages[i].role;
    if (role != "user" && role != "assistant") {  // "tool" included: these families have no tool syntax
      return Status::invalid_argument("messages[" + std::to_string(i) + "]: role '" + role +
                                      "' is not supported here (only a first system message, then user/assistant)");
    }
    if ((role == "user") != want_user) {
      return Status::invalid_argument("messages[" + std::to_string(i) +
                                      "]: after the optional system message, roles must alternate user/assistant/user/...");
    }
    turns.push_back(&messages[i]);
  }
  if (turns.empty()) return Status::invalid_argument("messages: the conversation has no user message");
  return Status::ok();
}

}  // namespace

const char* chat_family_name(ChatFamily family) {
  for (const auto& [f, name] : kNames) {
    if (f == family) return name;
  }
  return "?";
}

std::optional<ChatFamily> chat_family_from_name(std::string_view name) {
  for (const auto& [f, n] : kNames) {
    if (name == n) return f;
  }
  return std::nullopt;
}

std::string strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  const size_t end = s.find_last_not_of(kSpace);
  return std::string(s.substr(begin, end - begin + 1));
}

std::string chat_family_names() {
  std::string out;
  for (const auto& [f, n] : kNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::optional<ChatFamily> detect_chat_template(std::string_view t) {
  if (t.empty()) return std::nullopt;
  if (contains(t, "<|im_start|>")) return ChatFamily::kChatML;
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return ChatFamily::kLlama3;
  if (contains(t, "<start_of_turn>")) return ChatFamily::kGemma;
  if (contains(t, "<｜User｜>") && contains(t, "<｜Assistant｜>")) return ChatFamily::kDeepSeek;
  if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? ChatFamily::kLlama2 : ChatFamily::kMistral;
  if (contains(t, "<|user|>") && contains(t, "<|assistant|>")) return ChatFamily::kZephyr;
  return std::nullopt;
}

ChatTemplate::ChatTemplate(ChatFamily family, std::string bos_token, std::string eos_token)
    : family_(family), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

std::string ChatTemplate::reply_opening(const ChatRenderOptions& options) const {
  const bool thinks = family_ == ChatFamily::kDeepSeek && reasoning_syntax_ == ReasoningSyntax::kThink &&
                      options.enable_thinking == true;
  return thinks ? "<think>" : "";
}

std::string ChatTemplate::end_of_turn() const {
  switch (family_) {
    case ChatFamily::kLlama3: return "<|eot_id|>";
    case ChatFamily::kChatML: return "<|im_end|>";
    case ChatFamily::kGemma: return "<end_of_turn>";
    case ChatFamily::kLlama2:
    case ChatFamily::kMistral:
    case ChatFamily::kDeepSeek:
    case ChatFamily::kZephyr: return eos_;
  }
  return eos_;
}

ToolSyntax tool_syntax_for(ChatFamily family, std::string_view jinja, bool vocab_has_tool_calls_token) {
  switch (family) {
    case ChatFamily::kChatML: return jinja.empty() || contains(jinja, "<tool_call>") ? ToolSyntax::kHermes : ToolSyntax::kNone;
    case ChatFamily::kLlama3: return ToolSyntax::kLlama3;
    case ChatFamily::kMistral: return vocab_has_tool_calls_token ? ToolSyntax::kMistral : ToolSyntax::kNone;
    case ChatFamily::kDeepSeek: return ToolSyntax::kDeepSeek;
    default: return ToolSyntax::kNone;
  }
}

ReasoningSyntax reasoning_syntax_for(std::string_view jinja) {
  return contains(jinja, "<think>") && contains(jinja, "</think>") ? ReasoningSyntax::kThink : ReasoningSyntax::kNone;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const ChatRenderOptions& options) const {
  if (messages.empty()) return Status::invalid_argument("messages: must hold at least one message");
  const bool with_tools = options.tools != nullptr && !options.tools->empty();
  bool tool_messages = false;
  for (const ChatMessage& m : messages) tool_messages = tool_messages || m.role == "tool" || !m.tool_calls.empty();
  if (options.enable_thinking.has_value() && reasoning_syntax_ == ReasoningSyntax::kNone) {
    return Status::invalid_argument("chat_template_kwargs.enable_thinking: this model's chat template does not think");
  }
  std::string out;
  if (family_ == ChatFamily::kDeepSeek) {
    if ((with_tools || tool_messages) && tool_syntax_ != ToolSyntax::kDeepSeek) {
      return Status::invalid_argument(std::string(with_tools ? "tools" : "messages") +
                                      ": the deepseek chat template renders tool calls in the deepseek syntax only "
                                      "(--tool-parser deepseek)");
    }
    PAGODA_ASSIGN_OR_RETURN(out, render_deepseek(messages, add_generation_prompt, options));
    if (add_generation_prompt) out += options.assistant_prefix;
    return out;
  }
  if (with_tools || tool_messages) {
    if (tool_syntax_ == ToolSyntax::kHermes && family_ == ChatFamily::kChatML) {
      PAGODA_ASSIGN_OR_RETURN(out, render_hermes(messages, add_generation_prompt, options));
    } else if (tool_syntax_ == ToolSyntax::kLlama3 && family_ == ChatFamily::kLlama3) {
      PAGODA_ASSIGN_OR_RETURN(out, render_llama3_tools(messages, add_generation_prompt, options));
    } else {
      return Status::invalid_argument(std::string(with_tools ? "tools" : "messages") + ": this model's chat template (" +
                                      chat_family_name(family_) + ", tool syntax " + tool_syntax_name(tool_syntax_) +
                                      ") has no tool calling Pagoda renders (hermes on chatml, llama3 on llama3, "
                                      "deepseek on deepseek; --tool-parser picks the syntax)");
    }
  } else {
    PAGODA_ASSIGN_OR_RETURN(out, render_plain(messages, add_generation_prompt));
  }
  if (add_generation_prompt && reasoning_syntax_ == ReasoningSyntax::kThink && options.enable_thinking == false) {
    out += "<think>\n\n</think>\n\n";  // Qwen 3: thinking off is an empty think block
  }
  if (add_generation_prompt) out += options.assistant_prefix;
  return out;
}

Result<std::string> ChatTemplate::render_plain(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  switch (family_) {
    case ChatFamily::kLlama2: return render_llama2(messages);
    case ChatFamily::kMistral: return render_mistral(messages);
    case ChatFamily::kGemma: return render_gemma(messages, add_generation_prompt);
    case ChatFamily::kDeepSeek: return render_deepseek(messages, add_generation_prompt, {});
    case ChatFamily::kLlama3:
      // {% set content = '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim
      // + '<|eot_id|>' %}, bos_token before the first.
      out = bos_;
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + strip(m.content) + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFamily::kChatML:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFamily::kZephyr:
      for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + eos_ + "\n";
      if (add_generation_prompt) out += "<|assistant|>\n";
      return out;
  }
  return out;
}

// Llama-2-chat: the system message goes inside the first [INST] block; content is stripped.
Result<std::string> ChatTemplate::render_llama2(const std::vector<ChatMessage>& messages) const {
  const ChatMessage* system = nullptr;
  std::vector<const ChatMessage*> turns;
  PAGODA_RETURN_IF_ERROR(split_alternating(messages, system, turns));
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    std::string content = turns[i]->content;
    if (i == 0 && system != nullptr) content = "<<SYS>>\n" + system->content + "\n<</SYS>>\n\n" + content;
    if (turns[i]->role == "user") {
      out += bos_ + "[INST] " + strip(content) + " [/INST]";
    } else {
      out += " " + strip(content) + " " + eos_;
    }
  }
  return out;
}

// Mistral-Instruct (v0.2 template with system support): the system message is prepended to the
// first user message.
Result<std::string> ChatTemplate::render_mistral(const std::vector<ChatMessage>& messages) const {
  const ChatMessage* system = nullptr;
  std::vector<const ChatMessage*> turns;
  PAGODA_RETURN_IF_ERROR(split_alternating(messages, system, turns));
  std::string out = bos_;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i]->role == "user") {
      const std::string prefix = i == 0 && system != nullptr ? system->content + "\n\n" : "";
      out += " [INST] " + prefix + turns[i]->content + " [/INST]";
    } else {
      out += " " + turns[i]->content + eos_;
    }
  }
  return out;
}

// Gemma: assistant is "model"; the system message is prepended to the first user turn (Gemma 2/3).
Result<std::string> ChatTemplate::render_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  const ChatMessage* system = nullptr;
  std::vector<const ChatMessage*> turns;
  PAGODA_RETURN_IF_ERROR(split_alternating(messages, system, turns));
  std::string out = bos_;
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string role = turns[i]->role == "assistant" ? "model" : turns[i]->role;
    const std::string prefix = i == 0 && system != nullptr ? system->content + "\n\n" : "";
    out += "<start_of_turn>" + role + "\n" + prefix + strip(turns[i]->content) + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace pagoda::model
