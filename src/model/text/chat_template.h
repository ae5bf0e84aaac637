// Chat templates: a conversation (role, content messages) -> the prompt text a chat model was
// trained on. Instead of a Jinja interpreter, the common families are written out in C++ and
// render exactly what their reference Hugging Face templates render (tests compare them with
// Jinja output of those templates):
//
//   llama2   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//   llama3   <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>...
//   chatml   <|im_start|>{role}\n{content}<|im_end|>\n ... (Qwen, Yi, many fine-tunes)
//   mistral  <s>[INST] {user} [/INST]{assistant}</s>[INST] ...   (system: prepended to the
//            first user message, separated by a blank line)
//   zephyr   <|{role}|>\n{content}</s>\n ...
//   gemma    <bos><start_of_turn>{user|model}\n{content}<end_of_turn>\n ... (system: prepended
//            to the first user message, separated by a blank line)
//   deepseek <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜><think></think>{reply}
//            <｜end▁of▁sentence｜> ... (DeepSeek-V3.1's template: every system message first,
//            joined by blank lines; tool results as <｜tool▁output▁begin｜>...<｜tool▁output▁end｜>;
//            thinking on (chat_template_kwargs) opens <think> instead of an empty block; offered
//            tools go after the system prompt in the "## Tools" form DeepSeek documents for V3.1,
//            which its template leaves to the caller)
//
// Detection (detect_chat_template) looks for each family's marker tokens in the GGUF's
// tokenizer.chat_template string, as llama.cpp does. A model without a template, or with one
// that is none of these, gets the FALLBACK: chatml (llama.cpp's choice too), with its
// <|im_start|>/<|im_end|> markers tokenized as plain text when the vocab lacks them.
//
// Rendering ends with the assistant's opening (add_generation_prompt) so the model writes the
// reply; `end_of_turn` is the text that ends an assistant turn (a stop marker for generation).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/text/chat_tools.h"

namespace pagoda::model {

enum class ChatFamily { kLlama2, kLlama3, kChatML, kMistral, kZephyr, kGemma, kDeepSeek };

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c, std::vector<ChatToolCall> calls = {}, std::string call_id = {})
      : role(std::move(r)), content(std::move(c)), tool_calls(std::move(calls)), tool_call_id(std::move(call_id)) {}
  std::string role;     // "system", "user", "assistant", "tool" (others are rejected by the parser)
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant: the calls it made
  std::string tool_call_id;              // tool: the call this result answers
};

// What a request adds to the conversation when rendering.
struct ChatRenderOptions {
  const std::vector<ChatTool>* tools = nullptr;  // offered tools (null or empty: none)
  std::optional<bool> enable_thinking;           // chat_template_kwargs.enable_thinking
  std::string assistant_prefix;                  // after the generation prompt: the reply's forced start
};

const char* chat_family_name(ChatFamily family);
std::optional<ChatFamily> chat_family_from_name(std::string_view name);  // "llama2", ... "gemma"
std::string chat_family_names();  // "llama2, llama3, chatml, mistral, zephyr, gemma, deepseek"
// Python's str.strip() / Jinja's trim over ASCII whitespace (what templates do to contents).
std::string strip(std::string_view s);

// The family of a Jinja template string; nullopt when it is empty or matches none.
std::optional<ChatFamily> detect_chat_template(std::string_view jinja);
// The tool-call syntax of a family (chat_tools.h): chatml -> hermes when its Jinja text (if
// any) mentions <tool_call>; llama3 -> llama3; mistral -> mistral when the vocabulary has a
// [TOOL_CALLS] token; else none. Reasoning: think when the Jinja text has <think> and </think>.
ToolSyntax tool_syntax_for(ChatFamily family, std::string_view jinja, bool vocab_has_tool_calls_token);
ReasoningSyntax reasoning_syntax_for(std::string_view jinja);

class ChatTemplate {
 public:
  // bos/eos: the texts of the model's BOS and EOS tokens (as the reference templates'
  // bos_token and eos_token); families that need none ignore them.
  ChatTemplate(ChatFamily family, std::string bos_token, std::string eos_token);

  // Errors (invalid_argument): no messages; roles out of order where the family requires
  // alternation (llama2, mistral, gemma: user/assistant alternate after an optional system).
  // With options.tools (non-empty): the tools and the calls and results in the conversation
  // are rendered as the template's syntax writes them (tool_syntax(); hermes as Qwen 3's
  // template, llama3 as Llama 3.1's with the tools in the first user message); an error for a
  // syntax with no rendering. Messages with tool calls or tool results need a syntax too.
  // enable_thinking false: a think template's generation prompt gets an empty think block
  // (Qwen 3's template).
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                             const ChatRenderOptions& options = {}) const;
  void set_syntax(ToolSyntax tools, ReasoningSyntax reasoning) {
    tool_syntax_ = tools;
    reasoning_syntax_ = reasoning;
  }
  ToolSyntax tool_syntax() const { return tool_syntax_; }
  ReasoningSyntax reasoning_syntax() const { return reasoning_syntax_; }

  ChatFamily family() const { return family_; }
  // What the rendered prompt ends with that belongs to the reply as a parser reads it: "<think>"
  // when a deepseek template thinks (its generation prompt opens the block), else "".
  std::string reply_opening(const ChatRenderOptions& options) const;
  // The text that closes an assistant turn ("</s>", "<|eot_id|>", "<|im_end|>", ...).
  std::string end_of_turn() const;

 private:
  Result<std::string> render_plain(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  Result<std::string> render_llama2(const std::vector<ChatMessage>& messages) const;
  Result<std::string> render_mistral(const std::vector<ChatMessage>& messages) const;
  Result<std::string> render_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  Result<std::string> render_hermes(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                    const ChatRenderOptions& options) const;
  Result<std::string> render_llama3_tools(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                          const ChatRenderOptions& options) const;
  Result<std::string> render_deepseek(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                      const ChatRenderOptions& options) const;

  ChatFamily family_;
  ToolSyntax tool_syntax_ = ToolSyntax::kNone;
  ReasoningSyntax reasoning_syntax_ = ReasoningSyntax::kNone;
  std::string bos_;
  std::string eos_;
};

}  // namespace pagoda::model
