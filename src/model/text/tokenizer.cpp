#include "model/text/tokenizer.h"

#include "model/text/byte_level.h"
#include "model/text/vocab_tables.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <queue>

namespace pagoda::model {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

std::string unescape_spaces(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out.push_back(' ');
      i += kSpaceMarker.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Scans one UTF-8 character at the start of `s` (non-empty). Returns n > 0 when a well-formed
// character of n bytes starts there; -n when the first n bytes are a maximal ill-formed subpart
// (to be replaced by one U+FFFD); 0 when `s` ends inside a character that may still be valid.
int scan_utf8(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the next byte (Unicode Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i <= need; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return 0;
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < lo || b > hi) return -i;
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

// Appends the well-formed characters of `in` to `out`, each maximal ill-formed subpart as
// U+FFFD. Unless `final`, stops before an unfinished character at the end. Returns the number
// of bytes of `in` consumed.
size_t append_sanitized_utf8(std::string_view in, bool final, std::string& out) {
  size_t i = 0;
  while (i < in.size()) {
    const int n = scan_utf8(in.substr(i));
    if (n > 0) {
      out.append(in.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else if (n < 0) {
      out.append(kReplacement);
      i += static_cast<size_t>(-n);
    } else {
      if (!final) break;
      out.append(kReplacement);  // the unfinished tail is one maximal subpart
      i = in.size();
    }
  }
  return i;
}

}  // namespace

Result<Tokenizer> Tokenizer::create(Vocab vocab) {
  PAGODA_RETURN_IF_ERROR(validate_vocab(vocab));
  Tokenizer tokenizer(std::move(vocab));
  if (tokenizer.vocab_.model == VocabModel::kBpe) PAGODA_RETURN_IF_ERROR(tokenizer.init_bpe());
  return tokenizer;
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.tokens.size();
  byte_to_id_ = build_byte_table(vocab_);
  piece_to_id_.reserve(n);
  pieces_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = vocab_.tokens[id];
    piece_to_id_.insert_or_assign(text, static_cast<int32_t>(id));
    uint8_t byte = 0;
    switch (vocab_.types[id]) {
      case TokenType::kUndefined:
      case TokenType::kNormal:
        if (vocab_.model == VocabModel::kBpe && vocab_.byte_level) {
          byte_level_decode(text, pieces_[id]);
          break;
        }
        pieces_[id] = unescape_spaces(text);
        break;
      case TokenType::kByte:
        CHECK(parse_byte_token(text, byte)) << "validated vocab has a bad byte token " << id;
        pieces_[id] = std::string(1, static_cast<char>(byte));
        break;
      case TokenType::kUserDefined:
        // SentencePiece-style text: an added token's ▁ is a space too, as Hugging Face's
        // decoder (Replace ▁ by ' ') reads Gemma's whitespace tokens ("▁▁", ...).
        pieces_[id] = vocab_.byte_level ? text : unescape_spaces(text);
        break;
      case TokenType::kUnknown:
      case TokenType::kControl:
      case TokenType::kUnused:
        break;
    }
    const TokenType type = vocab_.types[id];
    if (!text.empty() && (type == TokenType::kControl || type == TokenType::kUnknown ||
                          type == TokenType::kUserDefined)) {
      special_ids_.push_back(static_cast<int32_t>(id));
      has_user_defined_ = has_user_defined_ || type == TokenType::kUserDefined;
    }
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[a].size() > vocab_.tokens[b].size();
  });
  for (size_t rank = 0; rank < special_ids_.size(); ++rank) {
    const std::string& text = vocab_.tokens[special_ids_[rank]];
    special_rank_.try_emplace(text, static_cast<int32_t>(rank));
    special_first_byte_[static_cast<uint8_t>(text[0])] = true;
    if (special_lengths_.empty() || special_lengths_.back() != text.size()) {
      special_lengths_.push_back(text.size());
    }
  }
}

bool Tokenizer::special_matches(int32_t id, bool parse_special) const {
  return vocab_.types[id] == TokenType::kUserDefined || parse_special;
}

// llama.cpp's partition: special tokens are taken in priority order (longer text first); each
// takes its leftmost non-overlapping occurrences inside what is still raw text.
std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text,
                                                          bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!parse_special && !has_user_defined_) {
    if (!text.empty()) fragments.push_back({0, text.size(), -1});
    return fragments;
  }
  struct Occurrence {
    int32_t rank;
    size_t pos;
  };
  std::vector<Occurrence> found;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!special_first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    for (size_t len : special_lengths_) {
      if (len > text.size() - pos) continue;
      auto it = special_rank_.find(text.substr(pos, len));
      if (it != special_rank_.end() && special_matches(special_ids_[it->second], parse_special)) {
        found.push_back({it->second, pos});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
  });
  std::map<size_t, std::pair<size_t, int32_t>> taken;  // begin -> (end, token id); disjoint
  int32_t last_rank = -1;
  size_t last_end = 0;
  for (const Occurrence& occ : found) {
    const int32_t id = special_ids_[occ.rank];
    const size_t end = occ.pos + vocab_.tokens[id].size();
    if (occ.rank != last_rank) {
      last_rank = occ.rank;
      last_end = 0;
    }
    if (occ.pos < last_end) continue;  // overlaps this token's previous match
    auto next = taken.lower_bound(end);
    if (next != taken.begin() && std::prev(next)->second.first > occ.pos) continue;
    taken.emplace(occ.pos, std::make_pair(end, id));
    last_end = end;
  }
  size_t raw_begin = 0;
  for (const auto& [begin, span] : taken) {
    if (begin > raw_begin) fragments.push_back({raw_begin, begin, -1});
    fragments.push_back({begin, span.first, span.second});
    raw_begin = span.first;
  }
  if (raw_begin < text.size()) fragments.push_back({raw_begin, text.size(), -1});
  return fragments;
}

bool Tokenizer::space_prefix(std::string_view text, size_t begin, bool after_special) const {
  if (!vocab_.add_space_prefix || !after_special) return false;
  if (vocab_.space_prefix_first_only && begin != 0) return false;
  const std::string_view rest = text.substr(begin);
  return !(vocab_.space_prefix_unless_space &&
           (rest.starts_with(' ') || rest.starts_with(kSpaceMarker)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> ids;
  if (add_bos) {
    CHECK_GE(vocab_.bos_id, 0) << "encode(add_bos=true) with a vocab that has no BOS";
    ids.push_back(vocab_.bos_id);
  }
  bool after_special = true;  // the first raw fragment gets the dummy prefix too
  std::string escaped;
  for (const Fragment& fragment : split_special(text, parse_special)) {
    if (fragment.special_id >= 0) {
      ids.push_back(fragment.special_id);
      after_special = true;
      continue;
    }
    const bool prefix = space_prefix(text, fragment.begin, after_special);
    if (vocab_.model == VocabModel::kBpe) {
      encode_bpe_fragment(text.substr(fragment.begin, fragment.end - fragment.begin), prefix,
                          ids);
      after_special = false;
      continue;
    }
    escaped.clear();
    if (prefix) escaped.append(kSpaceMarker);
    for (char c : text.substr(fragment.begin, fragment.end - fragment.begin)) {
      if (c == ' ') {
        escaped.append(kSpaceMarker);
      } else {
        escaped.push_back(c);
      }
    }
    encode_fragment(escaped, ids);
    after_special = false;
  }
  return ids;
}

// BPE over one escaped fragment: a doubly linked list of symbols (spans of `text`) and a
// priority queue of candidate merges. A queued merge is stale once either side has changed,
// which the length check detects: a symbol's length only grows, or drops to 0 when absorbed.
void Tokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t prev, next;   // neighbours in the list, -1 at the ends
    uint32_t begin, len;  // span of `text`; len 0 once merged into its left neighbour
  };
  struct Merge {
    float score;
    int32_t left, right;
    uint32_t len;  // len of left + len of right when queued
  };
  struct Lower {  // priority: higher score, then leftmost
    bool operator()(const Merge& a, const Merge& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  CHECK_LT(text.size(), size_t{std::numeric_limits<int32_t>::max()}) << "fragment too long";
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < text.size();) {
    const int n = scan_utf8(text.substr(i));
    const auto len = static_cast<uint32_t>(n > 0 ? n : 1);  // an ill-formed byte stands alone
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, index + 1, static_cast<uint32_t>(i), len});
    i += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Merge, std::vector<Merge>, Lower> queue;
  auto try_merge = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = symbols[left].len + symbols[right].len;
    auto it = piece_to_id_.find(text.substr(symbols[left].begin, len));
    if (it != piece_to_id_.end()) queue.push({vocab_.scores[it->second], left, right, len});
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    try_merge(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Merge merge = queue.top();
    queue.pop();
    Symbol& left = symbols[merge.left];
    Symbol& right = symbols[merge.right];
    if (left.len == 0 || right.len == 0 || left.next != merge.right ||
        left.len + right.len != merge.len) {
      continue;  // stale
    }
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = merge.left;
    try_merge(left.prev, merge.left);
    try_merge(merge.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].len);
    auto it = piece_to_id_.find(piece);
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : piece) out.push_back(byte_to_id_[static_cast<uint8_t>(c)]);  // byte fallback
  }
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  CHECK(id >= 0 && id < vocab_size())
      << "token id " << id << " out of range [0, " << vocab_size() << ")";
  const TokenType type = vocab_.types[id];
  if (special &&
      (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused)) {
    return vocab_.tokens[id];
  }
  return pieces_[id];
}

void Tokenizer::append_piece(int32_t id, bool& strip_space, std::string& out) const {
  CHECK(id >= 0 && id < vocab_size())
      << "token id " << id << " out of range [0, " << vocab_size() << ")";
  const std::string& piece = pieces_[id];
  const size_t skip = strip_space && !piece.empty() && piece[0] == ' ' ? 1 : 0;
  out.append(piece, skip);
  strip_space = id == vocab_.bos_id && vocab_.add_space_prefix;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string raw;
  bool strip_space = vocab_.add_space_prefix;
  for (int32_t id : ids) append_piece(id, strip_space, raw);
  std::string out;
  out.reserve(raw.size());
  append_sanitized_utf8(raw, /*final=*/true, out);
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, int32_t previous)
    : tokenizer_(&tokenizer),
      strip_space_(tokenizer.vocab().add_space_prefix && (previous < 0 || previous == tokenizer.vocab().bos_id)) {}

std::string StreamDecoder::push(int32_t id) {
  tokenizer_->append_piece(id, strip_space_, pending_);
  std::string out;
  const size_t used = append_sanitized_utf8(pending_, /*final=*/false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  append_sanitized_utf8(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace pagoda::model
