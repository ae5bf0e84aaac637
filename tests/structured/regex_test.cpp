// Regular expressions and code points against independent references: every string up to four
// characters over a small alphabet is matched by the compiled grammar exactly when std::regex
// (ECMAScript) matches it whole; UTF-8 sequences of code point ranges cover exactly their code
// points; JSON Schema patterns are searched as JSON Schema reads them; unsupported constructs
// are errors that name them.
#include <gtest/gtest.h>

#include <regex>

#include "structured/code_points.h"
#include "structured/json_schema.h"
#include "structured/grammar_test_util.h"
#include "structured/matcher.h"
#include "structured/regex.h"

namespace pagoda::structured {
namespace {

using testing::all_strings;
using testing::matches;

TEST(Regex, MatchesWholeStringsAsStdRegexDoes) {
  // (pattern, the same language for std::regex where its syntax differs)
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a*b", ""}, {"(ab|c)+", ""}, {"[a-c]{2,3}", ""}, {"a?b?c?", ""}, {"(a|b)*abb", ""}, {"[^ab]*", ""},
      {"\\d+(\\.\\d{1,2})?", ""}, {"a{3}", ""}, {"(a*)*b", ""}, {"(a|)+c", ""}, {".*a.*", ""}, {"a{0,3}b{1,}", ""},
      {"(?:ab)*", ""}, {"(?<x>a)b", "(a)b"}, {"(?P<y>a|b)c", "(a|b)c"}, {"\\s*\\S+", ""}, {"[\\]\\-a]+", ""},
      {"-?[0-9]+", ""}, {"(a|ab)(c|bcd)(d*)", ""}, {"a||b", ""}, {"(a{2}){1,2}", ""}, {"^ab*$", "ab*"},
      {"[\\w.]+", ""}, {"a+?b*?", "a+b*"}, {"[^\\d\\s]", ""}, {"x{2,}", ""}, {"\\.\\*\\+", ""}, {"[a\\-z]", ""},
      {"a{,2}", "a\\{,2\\}"}, {"a{", "a\\{"}, {"(((a)))|b{0}", ""}, {"[.]", ""}, {"", ""},
  };
  const std::vector<std::string> texts = all_strings("ab0 .\n-", 4);
  for (const auto& [pattern, reference] : cases) {
    SCOPED_TRACE(pattern);
    auto g = grammar_from_regex(pattern);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    ASSERT_TRUE(check_grammar(*g).is_ok());
    const std::regex re(reference.empty() ? pattern : reference, std::regex::ECMAScript);
    for (const std::string& t : texts) {
      ASSERT_EQ(matches(*g, t), std::regex_match(t, re)) << "text \"" << t << "\"";
    }
  }
}

TEST(Regex, CodePointsAndEscapes) {
  auto g = [](const char* p) {
    auto r = grammar_from_regex(p);
    EXPECT_TRUE(r.is_ok()) << p << ": " << (r.is_ok() ? "" : r.status().message());
    return r.is_ok() ? std::move(r).value() : Grammar{};
  };
  const Grammar greek = g("[α-ω]+");
  EXPECT_TRUE(matches(greek, "αβγ"));
  EXPECT_FALSE(matches(greek, "a"));
  EXPECT_FALSE(matches(greek, "\xce"));  // half a character
  const Grammar one = g("^.$");
  EXPECT_TRUE(matches(one, "é"));
  EXPECT_TRUE(matches(one, "日"));
  EXPECT_TRUE(matches(one, "😀"));
  EXPECT_FALSE(matches(one, "ab"));
  EXPECT_FALSE(matches(one, "\n"));
  EXPECT_FALSE(matches(one, "\xe2\x80\xa8"));  // U+2028 is a line terminator
  EXPECT_TRUE(matches(g("\\u00e9\\x41\\u{1F600}"), "éA😀"));
  EXPECT_TRUE(matches(g("[^a]"), "ß"));
  EXPECT_FALSE(matches(g("[^a]"), "\xed\xa0\x80"));  // an encoded surrogate is not UTF-8
  EXPECT_TRUE(matches(g("\\s"), "\xe3\x80\x80"));   // U+3000 is white space
  EXPECT_TRUE(matches(g("[\\b]"), "\b"));
}

TEST(Regex, UnsupportedConstructsAreNamedErrors) {
  auto err = [](const std::string& p) {
    auto r = grammar_from_regex(p);
    EXPECT_FALSE(r.is_ok()) << p;
    return r.is_ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(err("(a)\\1").find("backreferences"), std::string::npos);
  EXPECT_NE(err("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(err("a(?<!b)").find("lookaround"), std::string::npos);
  EXPECT_NE(err("\\bword").find("word boundaries"), std::string::npos);
  EXPECT_NE(err("a^b").find("^"), std::string::npos);
  EXPECT_NE(err("a$b").find("$"), std::string::npos);
  EXPECT_NE(err("(?i)a").find("flags"), std::string::npos);
  EXPECT_NE(err("a++").find("possessive"), std::string::npos);
  EXPECT_NE(err("a**").find("quantifier"), std::string::npos);
  EXPECT_NE(err("*a").find("repeats nothing"), std::string::npos);
  EXPECT_NE(err("a{3,2}").find("upper bound"), std::string::npos);
  EXPECT_NE(err("a{1001}").find("at most"), std::string::npos);
  EXPECT_NE(err("(a{1000}){1000}").find("states"), std::string::npos);
  EXPECT_NE(err("[z-a]").find("range"), std::string::npos);
  EXPECT_NE(err("(ab").find("unclosed"), std::string::npos);
  EXPECT_NE(err("ab)").find("unbalanced"), std::string::npos);
  EXPECT_NE(err("[ab").find("unterminated"), std::string::npos);
  EXPECT_NE(err("\\p{L}").find("Unicode properties"), std::string::npos);
  EXPECT_NE(err("\\q").find("unknown escape"), std::string::npos);
  EXPECT_NE(err("a\xff").find("UTF-8"), std::string::npos);
  EXPECT_NE(err("a\\").find("end of the pattern"), std::string::npos);
  EXPECT_NE(err(std::string(300, '(') + "a" + std::string(300, ')')).find("nested"), std::string::npos);
}

TEST(CodePoints, Utf8SequencesCoverExactlyTheirRange) {
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x41, 0x5A}, {0x70, 0x900}, {0x7FF, 0x800}, {0xD000, 0xE100}, {0xFFF0, 0x10010}, {0x10000, 0x10FFFF}, {0, 0x10FFFF}};
  for (const auto& [lo, hi] : ranges) {
    std::vector<Utf8Sequence> seqs;
    utf8_sequences(lo, hi, seqs);
    const auto count = [&](uint32_t cp) {
      std::string bytes;
      append_utf8(cp, bytes);
      int n = 0;
      for (const Utf8Sequence& s : seqs) {
        bool all = s.size() == bytes.size();
        for (size_t k = 0; all && k < s.size(); ++k) {
          const auto b = static_cast<uint8_t>(bytes[k]);
          all = b >= s[k].lo && b <= s[k].hi;
        }
        n += all;
      }
      return n;
    };
    const uint32_t step = hi - lo > 70000 ? 97 : 1;  // every code point of small ranges
    for (uint32_t cp = lo > 300 ? lo - 300 : 0; cp <= std::min<uint32_t>(hi + 300, kMaxCodePoint); cp += step) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      ASSERT_EQ(count(cp), cp >= lo && cp <= hi ? 1 : 0) << std::hex << "cp " << cp << " range " << lo << ".." << hi;
    }
  }
  // Decoding refuses what is not UTF-8.
  for (const char* bad : {"\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    size_t pos = 0;
    uint32_t cp = 0;
    EXPECT_FALSE(decode_utf8(bad, pos, cp)) << bad;
    EXPECT_EQ(pos, 0u);
  }
  CodePointSet s;
  s.add(10, 20), s.add(15, 30), s.add(31, 31), s.add(100, 90);
  s.normalize();
  ASSERT_EQ(s.ranges.size(), 1u);
  EXPECT_EQ(s.ranges[0].hi, 31u);
  const CodePointSet c = s.complement();
  EXPECT_TRUE(c.contains(9) && !c.contains(10) && c.contains(32) && !c.contains(0xD800) && c.contains(0x10FFFF));
}

TEST(JsonSchemaPattern, SearchedAsJsonSchemaReadsIt) {
  auto grammar = [](const char* pattern) {
    nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
    auto g = grammar_from_json_schema(schema);
    EXPECT_TRUE(g.is_ok()) << pattern << ": " << (g.is_ok() ? "" : g.status().message());
    return g.is_ok() ? std::move(g).value() : Grammar{};
  };
  const Grammar code = grammar("^[A-Z]{3}-\\d{2}$");
  EXPECT_TRUE(matches(code, "\"ABC-12\""));
  EXPECT_FALSE(matches(code, "\"ABC-123\""));
  EXPECT_FALSE(matches(code, "\"xABC-12\""));
  const Grammar anywhere = grammar("ab+");
  EXPECT_TRUE(matches(anywhere, "\"ab\""));
  EXPECT_TRUE(matches(anywhere, "\"x y abbb z\""));
  EXPECT_FALSE(matches(anywhere, "\"a b\""));
  EXPECT_FALSE(matches(anywhere, "\"ab\\\"\""));  // no escapes are generated
  const Grammar starts = grammar("^go");
  EXPECT_TRUE(matches(starts, "\"gone\""));
  EXPECT_FALSE(matches(starts, "\"ago\""));
  const Grammar quote = grammar("[^x]");
  EXPECT_FALSE(matches(quote, "\"\"\""));  // '"' is never a character of the string
  const Grammar dollar = grammar("a\\$");   // an escaped '$' is no anchor
  EXPECT_TRUE(matches(dollar, "\"a$ b\""));
  for (const char* bad : {"(a)\\1", "^a|b$"}) {
    auto g = grammar_from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"pattern", bad}});
    ASSERT_FALSE(g.is_ok()) << bad;
    EXPECT_NE(g.status().message().find("pattern at #"), std::string::npos) << g.status().message();
  }
  auto both = grammar_from_json_schema(nlohmann::ordered_json{{"type", "string"}, {"pattern", "a"}, {"maxLength", 3}});
  EXPECT_FALSE(both.is_ok());
}

}  // namespace
}  // namespace pagoda::structured
