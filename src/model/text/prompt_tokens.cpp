#include "model/text/prompt_tokens.h"

#include <string>

namespace pagoda::model {

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.encode(text, tokenizer.vocab().add_bos && tokenizer.bos_id() >= 0, true);
}

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
  PAGODA_ASSIGN_OR_RETURN(std::string text, chat_template.render(messages, true, options));
  // Templates that write the BOS text themselves get no second BOS.
  const std::string bos_text = tokenizer.bos_id() >= 0 ? tokenizer.token_to_piece(tokenizer.bos_id(), true) : "";
  const bool starts_with_bos = !bos_text.empty() && text.compare(0, bos_text.size(), bos_text) == 0;
  const bool add_bos = tokenizer.vocab().add_bos && tokenizer.bos_id() >= 0 && !starts_with_bos;
  return tokenizer.encode(text, add_bos, true);
}

}  // namespace pagoda::model
