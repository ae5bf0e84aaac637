// OpenAI's chat "messages" (JSON) -> ChatMessages, the one reading every front uses (the server
// validates and renders them; the router renders them to find the worker that caches the
// prompt, so both must read the same conversation):
//   role: system | developer (read as system) | user | assistant | tool
//   content: "text" | [{"type": "text", "text": "..."}, ...] (parts joined) | null (assistant
//            with tool_calls only)
//   assistant tool_calls: [{"id", "type": "function", "function": {"name", "arguments": "<JSON
//            object as text>"}}]; tool: tool_call_id
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/text/chat_template.h"

namespace pagoda::model {

// Errors are invalid_argument "FIELD: why"; *field (when non-null) gets FIELD ("messages",
// "messages[1].content").
Result<std::vector<ChatMessage>> chat_messages_from_json(const nlohmann::json& messages, std::string* field = nullptr);

}  // namespace pagoda::model
