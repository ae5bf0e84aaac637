// GPT-2's byte-to-unicode mapping, used by byte-level BPE vocabularies: every byte stands for one
// printable code point, so token texts are valid UTF-8 ("Ġ" = space, "Ċ" = newline).
// Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to the code point of the same value; the other
// 68 bytes map to U+0100, U+0101, ... in increasing byte order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::model {

// The UTF-8 text (2 bytes at most) of the code point that `byte` maps to.
std::string_view byte_level_char(uint8_t byte);

// Appends the bytes that the byte-level text `text` stands for. A character outside the mapping
// (or an ill-formed byte) is copied through as it is; returns false if there was any.
bool byte_level_decode(std::string_view text, std::string& out);

// Appends the byte-level text of the raw bytes `raw`.
void byte_level_encode(std::string_view raw, std::string& out);

}  // namespace pagoda::model
