// A request's prompt as token ids, the one way every front computes them (`pagoda serve` feeds
// them to the engine; `pagoda router` hashes their blocks to find the worker that caches them,
// so both must agree token for token).
//   text prompt: encode(text), BOS first when the vocab adds one, special tokens parsed.
//   chat:        the template's rendering, encoded the same way, except that a rendering that
//                already starts with the BOS text gets no second BOS.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace pagoda::model {

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text);

// Errors: the template's (invalid_argument: no messages, roles out of order).
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages);

}  // namespace pagoda::model
