// Vocab checks and the byte-fallback table (see tokenizer.h and vocab_tables.h).
#include <cmath>
#include <limits>

#include "model/text/byte_level.h"
#include "model/text/tokenizer.h"
#include "model/text/vocab_tables.h"

namespace pagoda::model {
namespace {

std::string byte_token_text(uint8_t byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
}

Status check_id(const char* name, int32_t id, size_t n_vocab) {
  if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n_vocab)) {
    return Status::error("vocab: " + std::string(name) + " " + std::to_string(id) +
                         " is out of range [0, " + std::to_string(n_vocab) + ") (-1 means none)");
  }
  return Status::ok();
}

}  // namespace

// "<0xNN>" (hex digits of either case) -> NN.
bool parse_byte_token(std::string_view text, uint8_t& byte) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return false;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return false;
    value = value * 16 + digit;
  }
  byte = static_cast<uint8_t>(value);
  return true;
}

// The token for each byte in byte fallback: a BYTE token, else a token spelled "<0xNN>"
// (llama.cpp's lookup), else the one-byte token, else unk_id (may be -1). Types must be valid.
std::array<int32_t, 256> build_byte_table(const Vocab& vocab) {
  if (vocab.model == VocabModel::kBpe && vocab.byte_level) {  // the byte's byte-level character
    std::array<int32_t, 256> table;
    table.fill(vocab.unk_id);
    for (size_t id = vocab.tokens.size(); id-- > 0;) {
      const std::string& text = vocab.tokens[id];
      if (text.size() > 2 || vocab.types[id] == TokenType::kControl) continue;
      for (size_t b = 0; b < 256; ++b) {
        if (text == byte_level_char(static_cast<uint8_t>(b))) table[b] = static_cast<int32_t>(id);
      }
    }
    return table;
  }
  std::array<int32_t, 256> typed, spelled, single;
  typed.fill(-1);
  spelled.fill(-1);
  single.fill(-1);
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    uint8_t byte = 0;
    if (vocab.types[id] == TokenType::kByte && parse_byte_token(text, byte) && typed[byte] < 0) {
      typed[byte] = static_cast<int32_t>(id);
    }
    if (text.size() == 6 && parse_byte_token(text, byte) && text == byte_token_text(byte)) {
      spelled[byte] = static_cast<int32_t>(id);
    }
    if (text.size() == 1) single[static_cast<uint8_t>(text[0])] = static_cast<int32_t>(id);
  }
  std::array<int32_t, 256> table;
  for (size_t b = 0; b < 256; ++b) {
    table[b] = typed[b] >= 0     ? typed[b]
               : spelled[b] >= 0 ? spelled[b]
               : single[b] >= 0  ? single[b]
                                 : vocab.unk_id;
  }
  return table;
}

Status validate_vocab(const Vocab& vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) return Status::error("vocab: no tokens");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::error("vocab: " + std::to_string(n) + " tokens is more than int32 ids allow");
  }
  if (vocab.scores.size() != n || vocab.types.size() != n) {
    return Status::error("vocab: " + std::to_string(n) + " tokens but " +
                         std::to_string(vocab.scores.size()) + " scores and " +
                         std::to_string(vocab.types.size()) + " token types");
  }
  for (size_t id = 0; id < n; ++id) {
    const std::string where =
        "vocab: token " + std::to_string(id) + " ('" + vocab.tokens[id] + "')";
    if (std::isnan(vocab.scores[id])) return Status::error(where + " has a NaN score");
    const auto type = static_cast<int32_t>(vocab.types[id]);
    if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
      return Status::error(where + " has unknown token type " + std::to_string(type));
    }
    uint8_t byte = 0;
    if (vocab.types[id] == TokenType::kByte && !parse_byte_token(vocab.tokens[id], byte)) {
      return Status::error(where + " has type BYTE but is not spelled <0xNN>");
    }
  }
  PAGODA_RETURN_IF_ERROR(check_id("bos_id", vocab.bos_id, n));
  PAGODA_RETURN_IF_ERROR(check_id("eos_id", vocab.eos_id, n));
  PAGODA_RETURN_IF_ERROR(check_id("unk_id", vocab.unk_id, n));
  if (vocab.add_bos && vocab.bos_id < 0)
    return Status::error("vocab: add_bos is set but there is no bos_id");
  if (vocab.add_eos && vocab.eos_id < 0)
    return Status::error("vocab: add_eos is set but there is no eos_id");
  // Byte-level BPE needs no token for every byte: as in llama.cpp, a byte without one (and no
  // unk) is dropped from the ids (Falcon's vocab has no token for <0x03>, for example).
  if (vocab.model == VocabModel::kBpe && vocab.byte_level) return Status::ok();
  const std::array<int32_t, 256> bytes = build_byte_table(vocab);
  for (size_t b = 0; b < 256; ++b) {
    if (bytes[b] < 0) {
      return Status::error("vocab: no token for byte " + byte_token_text(static_cast<uint8_t>(b)) +
                           " and no unk token, so byte fallback cannot encode every text");
    }
  }
  return Status::ok();
}

}  // namespace pagoda::model
