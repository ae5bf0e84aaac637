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
#include <vector>

#include "core/status.h"

namespace pagoda::model {

enum class ChatFamily { kLlama2, kLlama3, kChatML, kMistral, kZephyr, kGemma };

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" (others are rejected by the parser)
  std::string content;
};

const char* chat_family_name(ChatFamily family);
std::optional<ChatFamily> chat_family_from_name(std::string_view name);  // "llama2", ... "gemma"
std::string chat_family_names();  // "llama2, llama3, chatml, mistral, zephyr, gemma"

// The family of a Jinja template string; nullopt when it is empty or matches none.
std::optional<ChatFamily> detect_chat_template(std::string_view jinja);

class ChatTemplate {
 public:
  // bos/eos: the texts of the model's BOS and EOS tokens (as the reference templates'
  // bos_token and eos_token); families that need none ignore them.
  ChatTemplate(ChatFamily family, std::string bos_token, std::string eos_token);

  // Errors (invalid_argument): no messages; roles out of order where the family requires
  // alternation (llama2, mistral, gemma: user/assistant alternate after an optional system).
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;

  ChatFamily family() const { return family_; }
  // The text that closes an assistant turn ("</s>", "<|eot_id|>", "<|im_end|>", ...).
  std::string end_of_turn() const;

 private:
  Result<std::string> render_llama2(const std::vector<ChatMessage>& messages) const;
  Result<std::string> render_mistral(const std::vector<ChatMessage>& messages) const;
  Result<std::string> render_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  ChatFamily family_;
  std::string bos_;
  std::string eos_;
};

}  // namespace pagoda::model
