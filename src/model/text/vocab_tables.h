// Helpers shared by the tokenizer sources (model/ only): byte tokens and the byte-fallback table.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "model/text/tokenizer.h"

namespace pagoda::model {

// "<0xNN>" (hex digits of either case) -> NN; false for any other text.
bool parse_byte_token(std::string_view text, uint8_t& byte);

// The token each byte falls back to (see vocab.cpp); unk_id (may be -1) where there is none.
// Types must be valid.
std::array<int32_t, 256> build_byte_table(const Vocab& vocab);

}  // namespace pagoda::model
