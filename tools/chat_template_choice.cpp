#include "tools/chat_template_choice.h"

#include <optional>

namespace pagoda::tools {

Result<model::ChatTemplate> choose_chat_template(const std::string& family_name, const std::string& jinja,
                                                 const model::Tokenizer& tok, const Logger& logger) {
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
  logger.info("chat template: " + std::string(model::chat_family_name(*family)));
  auto piece = [&](int32_t id) { return id >= 0 ? tok.token_to_piece(id, true) : std::string(); };
  return model::ChatTemplate(*family, piece(tok.bos_id()), piece(tok.eos_id()));
}

}  // namespace pagoda::tools
