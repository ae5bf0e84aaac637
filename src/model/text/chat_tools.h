// Tools and reasoning in chat: what a request offers (OpenAI's `tools`), what an assistant turn
// called (`tool_calls`), which syntax a model family writes calls in, and whether its template
// thinks in <think>...</think>.
//
// Syntaxes (chat_output.h parses them; chat_template.h renders tools and calls in them):
//   hermes   <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one block per call
//            (Hermes 2 Pro, Qwen 2.5 / 3 / 3.5; chatml templates that mention <tool_call>)
//   llama3   {"name": N, "parameters": {...}} as the whole reply, or after <|python_tag|>,
//            several separated by ';' (Llama 3.1 / 3.2 / 3.3 JSON tool calling)
//   mistral  [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...] (Mistral v3 tokenizers)
//   deepseek <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
//            <｜tool▁calls▁end｜> (DeepSeek-V3.1); V3 / R1's form, a call begun by "function"
//            <｜tool▁sep｜>N\n```json\n{...}\n```, is read too
//   none     the model has no tool syntax: requests with tools are refused
// The syntax is chosen from the chat template family, its Jinja text and the vocabulary
// (tool_syntax_for), stated at start-up, and overridable by --tool-parser.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pagoda::model {

enum class ToolSyntax { kNone, kHermes, kLlama3, kMistral, kDeepSeek };

const char* tool_syntax_name(ToolSyntax syntax);
std::optional<ToolSyntax> tool_syntax_from_name(std::string_view name);  // "none", "hermes", ...
std::string tool_syntax_names();

// How the model's replies separate reasoning from the answer.
enum class ReasoningSyntax { kNone, kThink };  // kThink: a leading <think>...</think>
const char* reasoning_syntax_name(ReasoningSyntax syntax);
std::optional<ReasoningSyntax> reasoning_syntax_from_name(std::string_view name);

// One call an assistant made: arguments is JSON text (an object), as OpenAI carries it.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

// One offered tool: {"type": "function", "function": {"name", "description"?, "parameters"?}}
// in the client's key order (templates print it as given).
struct ChatTool {
  std::string name;
  nlohmann::ordered_json spec;  // the whole tool object
};

// OpenAI `tools` -> ChatTools. Errors are invalid_argument naming the field ("tools[1].function.name").
Result<std::vector<ChatTool>> chat_tools_from_json(const nlohmann::ordered_json& tools, std::string* field = nullptr);

// Python's json.dumps(value, ensure_ascii=False) with its default separators (", ", ": ") or,
// with indent > 0, its indented form: what Jinja's `tojson` prints in Hugging Face templates.
std::string python_json(const nlohmann::ordered_json& value, int indent = 0);

}  // namespace pagoda::model
