#include "tools/chat_template_choice.h"

#include <optional>

namespace pagoda::tools {

Result<model::ChatTemplate> choose_chat_template(const std::string& family_name, const std::string& jinja,
                                                 const model::Tokenizer& tok, const Logger& logger,
                                                 const std::string& tool_parser, const std::string& reasoning_parser) {
  std::optional<model::ChatFamily> family;
  if (!family_name.empty()) {
    family = model::chat_family_from_name(family_name);
    if (!family) {
      return Status::invalid_argument("unknown --chat-template '" + family_name + "' (" + model::chat_family_names() +
                                      ")");
    }
  } else {
    family = model::detect_chat_template(jinja);
    if (!family) {
      logger.warn(std::string(jinja.empty() ? "the model has no chat template"
                                            : "the model's chat template is none of " + model::chat_family_names()) +
                  "; chat uses the chatml fallback (choose with --chat-template)");
      family = model::ChatFamily::kChatML;
    }
  }
  auto piece = [&](int32_t id) { return id >= 0 ? tok.token_to_piece(id, true) : std::string(); };
  model::ChatTemplate chat(*family, piece(tok.bos_id()), piece(tok.eos_id()));
  const std::vector<int32_t> tool_calls = tok.encode("[TOOL_CALLS]", false, true);
  const bool has_tool_calls_token = tool_calls.size() == 1 && piece(tool_calls[0]) == "[TOOL_CALLS]";
  model::ToolSyntax tools = model::tool_syntax_for(*family, jinja, has_tool_calls_token);
  if (!tool_parser.empty() && tool_parser != "auto") {
    auto named = model::tool_syntax_from_name(tool_parser);
    if (!named) return Status::invalid_argument("unknown --tool-parser '" + tool_parser + "' (auto, " + model::tool_syntax_names() + ")");
    tools = *named;
  }
  model::ReasoningSyntax reasoning = model::reasoning_syntax_for(jinja);
  if (!reasoning_parser.empty() && reasoning_parser != "auto") {
    auto named = model::reasoning_syntax_from_name(reasoning_parser);
    if (!named) return Status::invalid_argument("unknown --reasoning-parser '" + reasoning_parser + "' (auto, think, none)");
    reasoning = *named;
  }
  chat.set_syntax(tools, reasoning);
  logger.info("chat template: " + std::string(model::chat_family_name(*family)) + ", tool calls: " +
              model::tool_syntax_name(tools) + ", reasoning: " + model::reasoning_syntax_name(reasoning));
  return chat;
}

}  // namespace pagoda::tools
