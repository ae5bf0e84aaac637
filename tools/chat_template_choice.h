// Which chat template a command renders chats with: --chat-template FAMILY, else the family the
// model's Jinja template (GGUF tokenizer.chat_template, tokenizer_config.json) matches, else the
// chatml fallback (with a warning). `pagoda serve` and `pagoda router` choose alike, so a router
// tokenizes a chat exactly as the worker that serves it. The tool-call and reasoning syntaxes
// (model/text/chat_tools.h) come from the family, the Jinja text and the vocabulary unless
// --tool-parser / --reasoning-parser name them ("" = auto); the choice is logged.
#pragma once

#include <string>

#include "core/log.h"
#include "core/status.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"

namespace pagoda::tools {

Result<model::ChatTemplate> choose_chat_template(const std::string& family_name, const std::string& jinja,
                                                 const model::Tokenizer& tokenizer, const Logger& logger,
                                                 const std::string& tool_parser = "", const std::string& reasoning_parser = "");

}  // namespace pagoda::tools
