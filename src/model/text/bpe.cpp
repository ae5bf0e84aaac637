// Tokenizer, kBpe: BPE merging by merge rank (Hugging Face "BPE", GGUF model "gpt2").
//
// One raw fragment (text between special tokens) is encoded as:
//   1. NFC when normalize_nfc (ICU; ill-formed bytes are kept as they are).
//   2. byte_level: the pre-tokenizer cuts it into pieces; each piece is taken whole when
//      ignore_merges and its byte-level text is a token, else its bytes become their byte-level
//      character tokens and are merged (step 3).
//      Not byte_level (SentencePiece-style text): spaces become "▁", a "▁" is prepended when
//      add_space_prefix and the fragment is first or follows a special token, and the UTF-8
//      characters of the whole fragment are merged; a character that is not a token goes
//      through byte fallback ("<0xNN>" tokens, else unk). (Which fragments get the "▁":
//      Tokenizer::space_prefix, see Vocab.)
//   3. Merging: the adjacent pair with the lowest merge rank merges, leftmost first on ties,
//      until no adjacent pair has a merge (a linked list and a priority queue, O(n log n)).
#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <unicode/utf8.h>

#include <queue>
#include <unordered_map>

#include "model/text/byte_level.h"
#include "model/text/tokenizer.h"

namespace pagoda::model {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Appends the NFC form of `text`; runs of well-formed UTF-8 are normalized, ill-formed bytes
// are copied between them.
void append_nfc(std::string_view text, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  CHECK(U_SUCCESS(status)) << "ICU NFC: " << u_errorName(status);
  icu::StringByteSink<std::string> sink(&out);
  auto flush = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    const icu::StringPiece run(text.data() + begin, static_cast<int32_t>(end - begin));
    nfc->normalizeUTF8(0, run, sink, nullptr, status);
    CHECK(U_SUCCESS(status)) << "ICU NFC: " << u_errorName(status);
  };
  size_t run_begin = 0;
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t at = i;
    UChar32 cp = 0;
    U8_NEXT(bytes, i, length, cp);
    if (cp < 0) {
      flush(run_begin, static_cast<size_t>(at));
      out.append(text.substr(static_cast<size_t>(at), static_cast<size_t>(i - at)));
      run_begin = static_cast<size_t>(i);
    }
  }
  flush(run_begin, text.size());
}

size_t utf8_length(std::string_view s) {  // of the character at the start; ill-formed: 1
  int32_t i = 0;
  UChar32 cp = 0;
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), i, static_cast<int32_t>(s.size()), cp);
  return cp < 0 ? 1 : static_cast<size_t>(i);
}

}  // namespace

Status Tokenizer::init_bpe() {
  const std::vector<std::string>& merges = vocab_.merges;
  CHECK_LT(merges.size(), size_t{1} << 31) << "too many merges";
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    int32_t left = -1, right = -1;
    for (size_t space = merge.find(' '); space != std::string::npos && left < 0;
         space = merge.find(' ', space + 1)) {  // the first space with a token on each side
      auto l = piece_to_id_.find(std::string_view(merge).substr(0, space));
      auto r = piece_to_id_.find(std::string_view(merge).substr(space + 1));
      if (l != piece_to_id_.end() && r != piece_to_id_.end()) {
        left = l->second;
        right = r->second;
      }
    }
    if (left < 0) {
      return Status::invalid_argument("merge " + std::to_string(rank) + " ('" + merge +
                                      "') is not two tokens separated by a space");
    }
    auto merged = piece_to_id_.find(vocab_.tokens[left] + vocab_.tokens[right]);
    if (merged == piece_to_id_.end()) {
      return Status::invalid_argument("merge " + std::to_string(rank) + " ('" + merge +
                                      "') makes a text that is not a token");
    }
    merges_.try_emplace(pair_key(left, right), MergeResult{static_cast<int32_t>(rank), merged->second});
  }
  std::vector<std::string> regexes = vocab_.pre_regexes;
  if (regexes.empty() && vocab_.byte_level && !vocab_.pre.empty()) {
    PAGODA_ASSIGN_OR_RETURN(regexes, pre_tokenizer_regexes(vocab_.pre));
  }
  PAGODA_ASSIGN_OR_RETURN(pre_, PreTokenizer::create(regexes));
  return Status::ok();
}

void Tokenizer::encode_bpe_fragment(std::string_view raw, bool prefix,
                                    std::vector<int32_t>& out) const {
  std::string normalized;
  std::string_view text = raw;
  if (vocab_.normalize_nfc) {
    append_nfc(raw, normalized);
    text = normalized;
  }
  std::vector<int32_t> symbols;
  if (!vocab_.byte_level) {
    std::string escaped;
    if (prefix) escaped.append(kSpaceMarker);
    for (char c : text) {
      if (c == ' ') {
        escaped.append(kSpaceMarker);
      } else {
        escaped.push_back(c);
      }
    }
    std::vector<std::string_view> chars;
    const std::string_view view(escaped);
    for (size_t i = 0; i < view.size();) {
      const std::string_view c = view.substr(i, utf8_length(view.substr(i)));
      auto it = piece_to_id_.find(c);
      symbols.push_back(it == piece_to_id_.end() ? -1 : it->second);
      chars.push_back(c);
      i += c.size();
    }
    bpe_merge(symbols, chars, out);
    return;
  }
  // Pieces repeat (words), so each distinct short piece is encoded once per fragment: its ids
  // are out[first, first + count) where it first appeared.
  constexpr size_t kMaxCachedPiece = 64;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> encoded;  // piece -> (first, count)
  std::string mapped;
  for (const auto& [begin, end] : pre_.split(text)) {
    const std::string_view piece = text.substr(begin, end - begin);
    const size_t first = out.size();
    if (piece.size() <= kMaxCachedPiece) {
      auto it = encoded.find(piece);
      if (it != encoded.end()) {
        const auto [from, count] = it->second;
        for (size_t i = 0; i < count; ++i) out.push_back(out[from + i]);
        continue;
      }
    }
    bool whole = false;
    if (vocab_.ignore_merges) {
      mapped.clear();
      byte_level_encode(piece, mapped);
      auto it = piece_to_id_.find(mapped);
      if (it != piece_to_id_.end()) {
        out.push_back(it->second);
        whole = true;
      }
    }
    if (!whole) {
      symbols.clear();
      for (char c : piece) symbols.push_back(byte_to_id_[static_cast<uint8_t>(c)]);
      bpe_merge(symbols, {}, out);
    }
    if (piece.size() <= kMaxCachedPiece) encoded.emplace(piece, std::make_pair(first, out.size() - first));
  }
}

void Tokenizer::bpe_merge(std::vector<int32_t>& ids, std::span<const std::string_view> fallback,
                          std::vector<int32_t>& out) const {
  if (ids.empty()) return;
  CHECK_LT(ids.size(), size_t{1} << 31) << "piece too long";
  struct Candidate {
    int32_t rank, left, right;  // symbol indices
    int32_t left_id, right_id;  // their ids when queued; a change makes the candidate stale
  };
  struct Later {  // min-heap on (rank, left)
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    }
  };
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, Later> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || ids[left] < 0 || ids[right] < 0) return;
    auto it = merges_.find(pair_key(ids[left], ids[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, right, ids[left], ids[right]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  constexpr int32_t kAbsorbed = -2;
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (next[c.left] != c.right || ids[c.left] != c.left_id || ids[c.right] != c.right_id) {
      continue;  // stale
    }
    ids[c.left] = merges_.at(pair_key(c.left_id, c.right_id)).id;
    ids[c.right] = kAbsorbed;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    consider(prev[c.left], c.left);
    consider(c.left, next[c.left]);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) {
    if (ids[i] >= 0) {
      out.push_back(ids[i]);
    } else if (static_cast<size_t>(i) < fallback.size()) {
      for (char c : fallback[i]) out.push_back(byte_to_id_[static_cast<uint8_t>(c)]);
    } else if (vocab_.unk_id >= 0) {
      out.push_back(vocab_.unk_id);
    }  // else a byte-level byte without a token and no unk: dropped, as llama.cpp does
  }
}

}  // namespace pagoda::model
