#include "model/text/chat_messages.h"

namespace pagoda::model {

using nlohmann::json;

Result<std::vector<ChatMessage>> chat_messages_from_json(const json& m, std::string* field) {
  auto fail = [&](const std::string& at, const std::string& why) -> Status {
    if (field != nullptr) *field = at;
    return Status::invalid_argument(at + ": " + why);
  };
  if (!m.is_array() || m.empty()) return fail("messages", "must be a non-empty array of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return fail(at, "must be an object");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) return fail(at + ".role", "must be a string");
    ChatMessage message;
    message.role = role->get<std::string>();
    if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
    if (message.role != "system" && message.role != "user" && message.role != "assistant" && message.role != "tool") {
      return fail(at + ".role", "must be system, developer, user, assistant or tool, got '" + message.role + "'");
    }
    if (message.role == "tool") {
      auto id = msg.find("tool_call_id");
      if (id != msg.end() && !id->is_null()) {
        if (!id->is_string()) return fail(at + ".tool_call_id", "must be a string");
        message.tool_call_id = id->get<std::string>();
      }
    }
    if (auto calls = msg.find("tool_calls"); calls != msg.end() && !calls->is_null()) {
      if (message.role != "assistant") return fail(at + ".tool_calls", "only assistant messages carry tool calls");
      if (!calls->is_array()) return fail(at + ".tool_calls", "must be an array");
      for (size_t k = 0; k < calls->size(); ++k) {
        const json& c = (*calls)[k];
        const std::string cat = at + ".tool_calls[" + std::to_string(k) + "]";
        if (!c.is_object()) return fail(cat, "must be an object");
        auto fn = c.find("function");
        if (fn == c.end() || !fn->is_object()) return fail(cat + ".function", "must be an object");
        auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
          return fail(cat + ".function.name", "must be a non-empty string");
        }
        ChatToolCall call;
        call.name = name->get<std::string>();
        auto args = fn->find("arguments");
        if (args == fn->end() || args->is_null()) {
          call.arguments = "{}";
        } else if (args->is_string()) {
          call.arguments = args->get<std::string>();
          const json parsed = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
          if (!parsed.is_object()) return fail(cat + ".function.arguments", "must be a JSON object (as text)");
        } else {
          return fail(cat + ".function.arguments", "must be a string of JSON");
        }
        if (auto id = c.find("id"); id != c.end() && id->is_string()) call.id = id->get<std::string>();
        message.tool_calls.push_back(std::move(call));
      }
    }
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      if (message.role != "assistant") return fail(at + ".content", "is required");
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return fail(at + ".content", "only text parts ({\"type\": \"text\", \"text\": \"...\"}) are supported");
        }
        message.content += part["text"].get<std::string>();
      }
    } else {
      return fail(at + ".content", "must be a string or an array of text parts");
    }
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace pagoda::model
