#include "structured/code_points.h"

#include <algorithm>

namespace pagoda::structured {

namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t* out) {
  switch (encoded_length(cp)) {
    case 1: out[0] = static_cast<uint8_t>(cp); break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// [lo, hi] within one encoding length and outside the surrogates.
void split(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  const int n = encoded_length(lo);
  // Cut where the low 6*i bits stop covering a whole continuation-byte span, so that each
  // piece is a product of per-byte ranges.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  Utf8Sequence seq;
  for (int k = 0; k < n; ++k) seq.push_back({a[k], b[k]});
  out.push_back(std::move(seq));
}

}  // namespace

void CodePointSet::normalize() {
  for (CodePointRange& r : ranges) r.hi = std::min(r.hi, kMaxCodePoint);
  std::erase_if(ranges, [](const CodePointRange& r) { return r.lo > r.hi; });
  std::sort(ranges.begin(), ranges.end(), [](const CodePointRange& x, const CodePointRange& y) { return x.lo < y.lo; });
  std::vector<CodePointRange> merged;
  for (const CodePointRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  ranges = std::move(merged);
}

CodePointSet CodePointSet::complement() const {
  CodePointSet out;
  uint32_t next = 0;
  for (const CodePointRange& r : ranges) {
    if (r.lo > next) out.add(next, r.lo - 1);
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
  // Surrogates are not characters: take them out.
  CodePointSet cut;
  for (const CodePointRange& r : out.ranges) {
    if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
      cut.ranges.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateLo) cut.add(r.lo, kSurrogateLo - 1);
    if (r.hi > kSurrogateHi) cut.add(kSurrogateHi + 1, r.hi);
  }
  return cut;
}

bool CodePointSet::contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CodePointRange& r) { return v < r.lo; });
  return it != ranges.begin() && std::prev(it)->hi >= cp;
}

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  // Surrogates out, then one piece per encoding length.
  if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
    if (lo < kSurrogateLo) utf8_sequences(lo, kSurrogateLo - 1, out);
    if (hi > kSurrogateHi) utf8_sequences(kSurrogateHi + 1, hi, out);
    return;
  }
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && hi > edge) {
      utf8_sequences(lo, edge, out);
      utf8_sequences(edge + 1, hi, out);
      return;
    }
  }
  split(lo, hi, out);
}

void append_utf8(uint32_t cp, std::string& out) {
  uint8_t b[4];
  encode(cp, b);
  out.append(reinterpret_cast<const char*>(b), static_cast<size_t>(encoded_length(cp)));
}

bool decode_utf8(std::string_view text, size_t& pos, uint32_t& cp) {
  if (pos >= text.size()) return false;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  int n = 0;
  uint32_t v = 0;
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 2, v = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, v = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, v = b0 & 0x07;
  } else {
    return false;
  }
  if (pos + static_cast<size_t>(n) > text.size()) return false;
  for (int k = 1; k < n; ++k) {
    const uint8_t b = byte(pos + static_cast<size_t>(k));
    if ((b & 0xC0) != 0x80) return false;
    v = (v << 6) | (b & 0x3F);
  }
  if (encoded_length(v) != n || v > kMaxCodePoint || (v >= kSurrogateLo && v <= kSurrogateHi)) return false;
  cp = v;
  pos += static_cast<size_t>(n);
  return true;
}

}  // namespace pagoda::structured
