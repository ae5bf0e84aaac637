#include "model/text/pre_tokenizer.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utf16.h>

#include "core/check.h"

namespace pagoda::model {
namespace {

// llama.cpp's regex_exprs (llama-vocab.cpp); the first four lists are tokenizer.json's own.
const char* const kLlama3[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
const char* const kQwen2[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
// Qwen3.5: Qwen2's, with combining marks kept inside letter runs (\p{M}).
const char* const kQwen35[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
const char* const kDeepseekV3[] = {
    "\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",  // as tokenizer.json writes it (no normalizable characters)
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
const char* const kGpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"};
// llama.cpp's gpt-2 family regex has no trailing "|\\s+"; the gap it leaves is the same piece.
const char* const kGpt2NoTail =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
// deepseek-llm's letter class (Unicode's cased letters), as code points: a source file's
// characters could be changed by normalization (U+1FD3 is NFC U+0390, which would reverse a range).
const char* const kDeepseekLlm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}-\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}-\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}-\\x{2CF3}"
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+"};
const char* const kDeepseekCoder[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"};
const char* const kFalcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2NoTail, "[0-9][0-9][0-9]"};
const char* const kStarcoder[] = {"\\p{N}", kGpt2NoTail};
const char* const kDefault[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2NoTail, "\\p{N}+",
                                "[0-9][0-9][0-9]"};

template <size_t N>
std::vector<std::string> list(const char* const (&regexes)[N]) {
  return std::vector<std::string>(regexes, regexes + N);
}

// Oniguruma -> ICU (see the header): \s, \S, $ outside a class; $ inside a class.
std::string to_icu_syntax(std::string_view onig) {
  std::string out;
  int class_depth = 0;
  for (size_t i = 0; i < onig.size(); ++i) {
    const char c = onig[i];
    if (c == '\\' && i + 1 < onig.size()) {
      const char e = onig[++i];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += c;
        out += e;
      }
    } else if (c == '[') {
      ++class_depth;
      out += c;
      if (i + 1 < onig.size() && onig[i + 1] == '^') out += onig[++i];
      if (i + 1 < onig.size() && onig[i + 1] == ']') out += "\\]", ++i;  // literal ] first
    } else if (c == ']' && class_depth > 0) {
      --class_depth;
      out += c;
    } else if (c == '$') {
      out += class_depth > 0 ? "\\$" : "(?=\\n|\\z)";
    } else {
      out += c;
    }
  }
  return out;
}

// UTF-8 -> UTF-16 with the byte offset of every UTF-16 unit (+ one past the end). A byte that
// does not start a well-formed character becomes U+FFFD on its own.
void to_utf16(std::string_view text, icu::UnicodeString& out, std::vector<uint32_t>& byte_at) {
  out.remove();
  byte_at.clear();
  size_t i = 0;
  while (i < text.size()) {
    int32_t length = static_cast<int32_t>(std::min<size_t>(text.size() - i, 4));
    int32_t k = 0;
    UChar32 cp = 0;
    U8_NEXT(reinterpret_cast<const uint8_t*>(text.data() + i), k, length, cp);
    if (cp < 0) {
      cp = 0xFFFD;
      k = 1;
    }
    byte_at.push_back(static_cast<uint32_t>(i));
    if (U16_LENGTH(cp) == 2) byte_at.push_back(static_cast<uint32_t>(i));
    out.append(cp);
    i += static_cast<size_t>(k);
  }
  byte_at.push_back(static_cast<uint32_t>(text.size()));
}

}  // namespace

Result<std::vector<std::string>> pre_tokenizer_regexes(std::string_view name) {
  auto is = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view n : names) {
      if (name == n) return true;
    }
    return false;
  };
  if (is({"default"})) return list(kDefault);
  if (is({"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"})) return list(kLlama3);
  if (is({"qwen2", "stablelm2", "deepseek-r1-qwen"})) return list(kQwen2);
  if (is({"qwen35"})) return list(kQwen35);
  if (is({"deepseek-v3"})) return list(kDeepseekV3);
  if (is({"deepseek-llm"})) return list(kDeepseekLlm);
  if (is({"deepseek-coder"})) return list(kDeepseekCoder);
  if (is({"falcon"})) return list(kFalcon);
  if (is({"gpt-2", "mpt", "gpt-neox", "olmo"})) return list(kGpt2);
  if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"})) {
    return list(kStarcoder);
  }
  return Status::invalid_argument(
      "pre-tokenizer '" + std::string(name) +
      "' is not supported (supported: default, gpt-2, mpt, gpt-neox, olmo, llama-bpe, llama3, "
      "dbrx, smaug-bpe, qwen2, stablelm2, deepseek-r1-qwen, qwen35, deepseek-llm, deepseek-coder, deepseek-v3, falcon, "
      "starcoder, refact, command-r, smollm, codeshell, exaone)");
}

struct PreTokenizer::Compiled {
  std::vector<std::unique_ptr<icu::RegexPattern>> patterns;
};

Result<PreTokenizer> PreTokenizer::create(const std::vector<std::string>& regexes) {
  auto compiled = std::make_shared<Compiled>();
  for (const std::string& regex : regexes) {
    const std::string icu_regex = to_icu_syntax(regex);
    UErrorCode status = U_ZERO_ERROR;
    UParseError parse_error;
    std::unique_ptr<icu::RegexPattern> pattern(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(icu_regex), 0, parse_error, status));
    if (U_FAILURE(status) || pattern == nullptr) {
      return Status::invalid_argument("pre-tokenizer regex '" + regex + "' does not compile (" +
                                      u_errorName(status) + " at offset " +
                                      std::to_string(parse_error.offset) + ")");
    }
    compiled->patterns.push_back(std::move(pattern));
  }
  PreTokenizer pre;
  pre.regexes_ = regexes;
  pre.compiled_ = std::move(compiled);
  return pre;
}

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  if (text.empty()) return pieces;
  if (compiled_ == nullptr || compiled_->patterns.empty()) {
    pieces.emplace_back(0, text.size());
    return pieces;
  }
  icu::UnicodeString utf16;
  std::vector<uint32_t> byte_at;  // [utf16.length() + 1] UTF-16 index -> byte offset
  to_utf16(text, utf16, byte_at);
  std::vector<std::pair<int32_t, int32_t>> current{{0, utf16.length()}}, next;  // UTF-16 spans
  for (const auto& pattern : compiled_->patterns) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> matcher(pattern->matcher(utf16, status));
    CHECK(U_SUCCESS(status)) << "ICU matcher: " << u_errorName(status);
    next.clear();
    for (const auto& [begin, end] : current) {
      matcher->region(begin, end, status);  // opaque, anchoring bounds: the piece is the text
      int32_t at = begin;
      while (matcher->find()) {
        const int32_t match_begin = matcher->start(status);
        const int32_t match_end = matcher->end(status);
        if (match_end == match_begin) continue;  // an empty match splits nothing
        if (match_begin > at) next.emplace_back(at, match_begin);
        next.emplace_back(match_begin, match_end);
        at = match_end;
      }
      CHECK(U_SUCCESS(status)) << "ICU regex: " << u_errorName(status);
      if (at < end) next.emplace_back(at, end);
    }
    current.swap(next);
  }
  pieces.reserve(current.size());
  for (const auto& [begin, end] : current) pieces.emplace_back(byte_at[begin], byte_at[end]);
  return pieces;
}

}  // namespace pagoda::model
