// Code points for the byte grammars: sets of Unicode code points as sorted ranges, and their
// UTF-8 encodings as sequences of byte ranges, so a character class of a GBNF grammar or a
// regular expression ("[a-zα-ω]", ".", "[^\"]") becomes bytes the matcher (matcher.h) reads.
//
// CodePointSet: disjoint, non-adjacent ranges [lo, hi] in ascending order (normalize() makes
// them so), within [0, 0x10FFFF]. Surrogates (U+D800..U+DFFF) have no UTF-8 encoding: they are
// never encoded (complement() leaves them out, utf8_sequences() skips them).
//
// utf8_sequences: the encodings of every code point of one range as a list of sequences, each
// 1..4 byte ranges (a byte range per position), such that a byte string encodes a code point of
// the range iff it matches exactly one sequence. The split is the classic one (ranges cut at
// the encoding-length boundaries, then where continuation bytes stop spanning 0x80..0xBF).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::structured {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodePointRange {
  uint32_t lo = 0, hi = 0;  // inclusive
};

struct CodePointSet {
  std::vector<CodePointRange> ranges;

  void add(uint32_t lo, uint32_t hi) { ranges.push_back({lo, hi}); }
  void add(const CodePointSet& other) { ranges.insert(ranges.end(), other.ranges.begin(), other.ranges.end()); }
  void normalize();                  // sorts and merges overlapping or adjacent ranges
  CodePointSet complement() const;   // of a normalized set, within [0, 0x10FFFF] minus surrogates
  bool contains(uint32_t cp) const;  // of a normalized set
  bool ascii_only() const { return !ranges.empty() && ranges.back().hi < 0x80; }
};

struct ByteRange {
  uint8_t lo = 0, hi = 0;  // inclusive
};
using Utf8Sequence = std::vector<ByteRange>;  // 1..4 positions

// Appends the sequences encoding [lo, hi] (surrogates skipped) to out.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out);

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF, not a surrogate) to out.
void append_utf8(uint32_t cp, std::string& out);

// Decodes one code point of text at pos and advances pos. Invalid UTF-8 (a stray continuation,
// a truncated or overlong sequence, a surrogate, > U+10FFFF): false, pos unchanged.
bool decode_utf8(std::string_view text, size_t& pos, uint32_t& cp);

}  // namespace pagoda::structured
