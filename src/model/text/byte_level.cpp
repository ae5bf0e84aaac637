#include "model/text/byte_level.h"

#include <array>

namespace pagoda::model {
namespace {

struct ByteLevelTables {
  std::array<uint32_t, 256> code_point{};  // byte -> code point
  std::array<std::string, 256> utf8;       // byte -> UTF-8 of its code point
  std::array<int16_t, 324> byte_of{};      // code point (< 324) -> byte, -1 if none

  ByteLevelTables() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next++;
      code_point[b] = cp;
      byte_of[cp] = static_cast<int16_t>(b);
      if (cp < 0x80) {
        utf8[b] = std::string(1, static_cast<char>(cp));
      } else {
        utf8[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables kTables;  // immutable after construction
  return kTables;
}

}  // namespace

std::string_view byte_level_char(uint8_t byte) { return tables().utf8[byte]; }

void byte_level_encode(std::string_view raw, std::string& out) {
  const ByteLevelTables& t = tables();
  for (char c : raw) out += t.utf8[static_cast<uint8_t>(c)];
}

bool byte_level_decode(std::string_view text, std::string& out) {
  const ByteLevelTables& t = tables();
  bool all_mapped = true;
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp = 0x110000;  // not in the mapping
    size_t n = 1;
    if (b0 < 0x80) {
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() &&
               (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
      n = 2;
    }
    if (cp < t.byte_of.size() && t.byte_of[cp] >= 0) {
      out.push_back(static_cast<char>(t.byte_of[cp]));
    } else {
      all_mapped = false;
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return all_mapped;
}

}  // namespace pagoda::model
