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
    if (message.role != "system" && message.role != "user" && message.role != "assistant") {
      return fail(at + ".role", "must be system, developer, user or assistant, got '" + message.role + "'");
    }
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      if (message.role != "assistant") return fail(at + ".content", "is required");
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        if (!part.is_object() || part.value("type", std::string()) != "text" || !part.contains("text") ||
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
