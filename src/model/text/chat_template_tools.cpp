// Conversations with tools, as the reference templates render them:
//   hermes  Qwen 3's chatml template (tools listed in the system turn; calls as <tool_call>
//           blocks in the assistant turn; results as <tool_response> blocks in a user turn)
//   llama3  Llama 3.1's template with tools_in_user_message (its default): an ipython
//           environment in the system turn, the tools as indented JSON in the first user turn,
//           calls as {"name": ..., "parameters": ...}, results in ipython turns
//   deepseek DeepSeek-V3.1's template (chat_template.h), the tools in the "## Tools" section
//           DeepSeek documents for V3.1, after the system prompt
// Call arguments are rendered as the JSON object they hold, printed as Jinja's tojson prints
// it (vLLM turns the OpenAI argument strings into objects before templating, too).
#include "model/text/chat_template.h"

namespace pagoda::model {

namespace {

using ojson = nlohmann::ordered_json;

Result<std::string> arguments_json(const ChatToolCall& call, size_t message) {
  const ojson args = ojson::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) {
    return Status::invalid_argument("messages[" + std::to_string(message) + "].tool_calls: the arguments of '" + call.name +
                                    "' are not a JSON object");
  }
  return python_json(args);
}

}  // namespace

Result<std::string> ChatTemplate::render_hermes(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                                const ChatRenderOptions& options) const {
  std::string out;
  size_t first = 0;
  if (options.tools != nullptr && !options.tools->empty()) {
    out += "<|im_start|>system\n";
    if (messages[0].role == "system") {
      out += messages[0].content + "\n\n";
      first = 1;
    }
    out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ChatTool& t : *options.tools) out += "\n" + python_json(t.spec);
    out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
           "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
           "<args-json-object>}\n</tool_call><|im_end|>\n";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      continue;
    }
    out += "<|im_start|>" + m.role + "\n" + m.content;
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      if (k > 0 || !m.content.empty()) out += "\n";
      PAGODA_ASSIGN_OR_RETURN(std::string args, arguments_json(m.tool_calls[k], i));
      out += "<tool_call>\n{\"name\": \"" + m.tool_calls[k].name + "\", \"arguments\": " + args + "}\n</tool_call>";
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

Result<std::string> ChatTemplate::render_llama3_tools(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                                      const ChatRenderOptions& options) const {
  const bool with_tools = options.tools != nullptr && !options.tools->empty();
  size_t first = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = strip(messages[0].content);
    first = 1;
  }
  std::string out = bos_ + "<|start_header_id|>system<|end_header_id|>\n\n";
  if (with_tools) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system + "<|eot_id|>";
  if (with_tools) {
    if (first >= messages.size() || messages[first].role != "user") {
      return Status::invalid_argument("messages: with tools, llama3's template needs a user message first (it carries the tools)");
    }
    out += "<|start_header_id|>user<|end_header_id|>\n\n"
           "Given the following functions, please respond with a JSON for a function call with its proper arguments "
           "that best answers the given prompt.\n\n"
           "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."
           "Do not use variables.\n\n";
    for (const ChatTool& t : *options.tools) out += python_json(t.spec, 4) + "\n\n";
    out += strip(messages[first].content) + "<|eot_id|>";
    ++first;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      // "content is mapping or content is iterable" holds for a string in Jinja: the template
      // prints the result through tojson, quotes and all.
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + python_json(ojson(m.content)) + "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() > 1) {
        return Status::invalid_argument("messages[" + std::to_string(i) +
                                        "].tool_calls: llama3's template takes one call per assistant message");
      }
      PAGODA_ASSIGN_OR_RETURN(std::string args, arguments_json(m.tool_calls[0], i));
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" + m.tool_calls[0].name +
             "\", \"parameters\": " + args + "}<|eot_id|>";
    } else {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + strip(m.content) + "<|eot_id|>";
    }
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// DeepSeek-V3.1 (models/templates/deepseek-ai-DeepSeek-V3.1.jinja in llama.cpp's sources):
// the system messages first, then the turns; an assistant turn right after a user turn opens
// with <｜Assistant｜> and an empty think block; a tool result is not a turn of its own, and
// after one the next assistant text follows directly.
Result<std::string> ChatTemplate::render_deepseek(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                                  const ChatRenderOptions& options) const {
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") system += (system.empty() ? "" : "\n\n") + m.content;
  }
  if (options.tools != nullptr && !options.tools->empty()) {
    if (!system.empty()) system += "\n\n";
    system += "## Tools\nYou have access to the following tools:\n";
    for (const ChatTool& t : *options.tools) {
      const ojson& fn = t.spec["function"];
      system += "\n### " + t.name + "\nDescription: " +
                (fn.contains("description") && fn["description"].is_string() ? fn["description"].get<std::string>() : "") +
                "\n\nParameters: " + python_json(fn.contains("parameters") ? fn["parameters"] : ojson::object()) + "\n";
    }
    system += "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
              "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
              "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
              "- `tool_call_name` must be an exact match to one of the available tools\n"
              "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
              "- For multiple tool calls, chain them directly without separators or spaces\n";
  }
  std::string out = bos_ + system;
  bool last_user = false, after_tool = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      after_tool = false;
      last_user = true;
      out += "<｜User｜>" + m.content;
    } else if (m.role == "assistant") {
      if (last_user) out += "<｜Assistant｜><think></think>";
      last_user = false;
      if (!m.tool_calls.empty()) {
        after_tool = false;
        out += m.content + "<｜tool▁calls▁begin｜>";
        for (const ChatToolCall& call : m.tool_calls) {
          PAGODA_ASSIGN_OR_RETURN(std::string args, arguments_json(call, i));
          out += "<｜tool▁call▁begin｜>" + call.name + "<｜tool▁sep｜>" + args + "<｜tool▁call▁end｜>";
        }
        out += "<｜tool▁calls▁end｜>" + eos_;
      } else if (after_tool) {
        after_tool = false;
        out += m.content + eos_;
      } else {
        const size_t think_end = m.content.find("</think>");  // earlier reasoning is not resent
        out += (think_end == std::string::npos ? m.content : m.content.substr(think_end + 8)) + eos_;
      }
    } else if (m.role == "tool") {
      last_user = false;
      after_tool = true;
      out += "<｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>";
    } else if (m.role != "system") {
      return Status::invalid_argument("messages[" + std::to_string(i) + "]: role '" + m.role + "' is not supported");
    }
  }
  if (add_generation_prompt && last_user && !after_tool) {
    const bool thinking = reasoning_syntax_ == ReasoningSyntax::kThink && options.enable_thinking == true;
    out += thinking ? "<｜Assistant｜><think>" : "<｜Assistant｜><think></think>";
  }
  return out;
}

}  // namespace pagoda::model
