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
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text);

// A text whose encode_prompt a worker advertises, so that a router can check that it tokenizes
// as the worker does (a different tokenizer would predict cache hits that never happen).
inline constexpr std::string_view kTokenizerProbe =
    "Once upon a time, 42 caf\xc3\xa9s said: \"Hello!\" \xe2\x80\x94 <s> [INST] ok\n\tend";

// Errors: the template's (invalid_argument: no messages, roles out of order).
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages, const ChatRenderOptions& options = {});

}  // namespace pagoda::model
