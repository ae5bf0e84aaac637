// GBNF grammars against independent references: a regular GBNF grammar accepts exactly what the
// equivalent std::regex matches (every short string), a recursive one exactly the balanced texts
// a counter accepts, a JSON grammar in llama.cpp's style accepts what nlohmann::json parses on a
// set of texts; malformed grammars, left recursion and token references are errors naming the
// line and column or the rule; a hostile chain of rules is refused, not a stack overflow.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "structured/gbnf.h"
#include "structured/grammar_test_util.h"
#include "structured/matcher.h"

namespace pagoda::structured {
namespace {

using testing::all_strings;
using testing::matches;

Grammar parse(const std::string& text) {
  auto g = grammar_from_gbnf(text);
  EXPECT_TRUE(g.is_ok()) << text << "\n" << (g.is_ok() ? "" : g.status().message());
  return g.is_ok() ? std::move(g).value() : Grammar{};
}

std::string error(const std::string& text) {
  auto g = grammar_from_gbnf(text);
  EXPECT_FALSE(g.is_ok()) << text;
  return g.is_ok() ? std::string() : g.status().message();
}

TEST(Gbnf, RegularGrammarsMatchTheirRegex) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(root ::= ("ab" | [c-d])+ "x"{1,2})", "(ab|[c-d])+x{1,2}"},
      {"root ::= item (\",\" item)*\nitem ::= [a-b]? \"c\"", "(a|b)?c(,(a|b)?c)*"},
      {"# a comment\nroot ::= \"a\"{2} b{0,2} # trailing\nb ::= [^a-c,x]", "aa[^a-c,x]{0,2}"},
      {"root ::= x{,2} \"c\"\nx ::= \"a\" | \"b\"", "[ab]{0,2}c"},
      {"root ::= (\n  \"a\"\n  | \"b\" \"c\"\n)*", "(a|bc)*"},
      {R"(root ::= .+ "c")", "[\\s\\S]+c"},
      {"root ::= my-rule_2 \"\"\nmy-rule_2 ::= \"\\x61\" \"\\n\"?", "a\\n?"},
      {"root ::= [a-bx]{2,}", "[a-bx]{2,}"},
  };
  const std::vector<std::string> texts = all_strings("abcx,\n", 4);
  for (const auto& [gbnf, pattern] : cases) {
    SCOPED_TRACE(gbnf);
    const Grammar g = parse(gbnf);
    ASSERT_TRUE(check_grammar(g).is_ok());
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const std::string& t : texts) ASSERT_EQ(matches(g, t), std::regex_match(t, re)) << "text \"" << t << "\"";
  }
}

TEST(Gbnf, RecursiveGrammarAcceptsBalancedText) {
  const Grammar g = parse("root ::= (\"(\" root \")\" | \"[\" root \"]\")*");
  for (const std::string& t : all_strings("()[]", 6)) {
    std::string open;  // the reference: a stack of openers
    bool ok = true;
    for (char c : t) {
      if (c == '(' || c == '[') {
        open.push_back(c);
      } else if (open.empty() || open.back() != (c == ')' ? '(' : '[')) {
        ok = false;
        break;
      } else {
        open.pop_back();
      }
    }
    ASSERT_EQ(matches(g, t), ok && open.empty()) << t;
  }
}

TEST(Gbnf, JsonGrammarAgreesWithAJsonParser) {
  const Grammar g = parse(R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws
string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)");
  for (const char* text : {R"({})", R"({"a": 1})", R"({"a": [1, 2.5, -3e4], "b": {"c": null}})", R"({"s": "x\"y\u00e9日本"})",
                           R"({"a": true, "b": false})", R"({"a": 1,})", R"({"a" 1})", R"([1])", R"({"a": 01})",
                           R"({"a": "unterminated)", R"({"a": [1 2]})", R"({"t": tru})"}) {
    const bool parses = nlohmann::json::parse(text, nullptr, false).is_object();
    EXPECT_EQ(matches(g, text), parses) << text;
  }
}

TEST(Gbnf, CodePoints) {
  const Grammar g = parse(R"(root ::= [^\x00-\x7F]+ "\u00e9" "\U0001F600")");
  EXPECT_TRUE(matches(g, "日本é😀"));
  EXPECT_FALSE(matches(g, "aé😀"));
  const Grammar dot = parse("root ::= . .");
  EXPECT_TRUE(matches(dot, "日\n"));
  EXPECT_FALSE(matches(dot, "日"));
  EXPECT_FALSE(matches(dot, "\xff\xff"));
  // Every '.' shares one rule: a hundred of them cost no more rules than two.
  std::string many = "root ::=";
  for (int i = 0; i < 100; ++i) many += " .";
  EXPECT_EQ(parse(many).num_rules(), dot.num_rules());
  const Grammar range = parse("root ::= [α-γ]");
  EXPECT_TRUE(matches(range, "β"));
  EXPECT_FALSE(matches(range, "δ"));
}

TEST(Gbnf, ErrorsNameWhereAndWhat) {
  EXPECT_NE(error("root ::= foo").find("rule foo is used but not defined"), std::string::npos);
  EXPECT_NE(error("start ::= \"a\"").find("no rule named root"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1: rule root is defined twice"), std::string::npos);
  EXPECT_NE(error("root ::= \"abc").find("line 1, column 10: unterminated string"), std::string::npos);
  EXPECT_NE(error("root ::= [abc").find("unterminated ["), std::string::npos);
  EXPECT_NE(error("root ::= (\"a\"").find("unclosed ("), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"{2").find("unclosed {"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\" \"\\q\"").find("unknown escape \\q"), std::string::npos);
  EXPECT_NE(error("root ::= \"\\x4\"").find("hex digits"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"{5,2}").find("upper bound"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"{100000}").find("at most"), std::string::npos);
  EXPECT_NE(error("root ::= * \"a\"").find("repeats nothing"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\" ::=").find("line 1"), std::string::npos);
  EXPECT_NE(error("root ::= <[1000]>").find("token references"), std::string::npos);
  EXPECT_NE(error("root ::= !<think>").find("token references"), std::string::npos);
  EXPECT_NE(error("root ::= [z-a]").find("range"), std::string::npos);
  EXPECT_NE(error("root ::= \"\xff\"").find("UTF-8"), std::string::npos);
  EXPECT_NE(error("root").find("::="), std::string::npos);
  // What the matcher cannot run: left recursion (direct, indirect, behind a nullable rule) and
  // repetitions of what can be empty.
  EXPECT_NE(error("root ::= root \"a\" | \"b\"").find("rule root can reach itself"), std::string::npos);
  EXPECT_NE(error("root ::= a\na ::= b \"x\"\nb ::= root | \"y\"").find("can reach itself"), std::string::npos);
  EXPECT_NE(error("root ::= e root \"x\" | \"y\"\ne ::= \"\" | \"z\"").find("can reach itself"), std::string::npos);
  EXPECT_NE(error("root ::= (\"a\"?)*").find("can reach itself"), std::string::npos);
  // Hostile: a chain of 2,000 rules before the first byte, 300 nested groups.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 2000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r2000 ::= \"a\"\n";
  EXPECT_NE(error(chain).find("nests"), std::string::npos);
  EXPECT_NE(error("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')).find("nested"), std::string::npos);
  // A long chain *after* bytes is fine: each rule reads one.
  std::string ok = "root ::= r0\n";
  for (int i = 0; i < 2000; ++i) ok += "r" + std::to_string(i) + " ::= \"a\" r" + std::to_string(i + 1) + "\n";
  ok += "r2000 ::= \"b\"\n";
  const Grammar long_ok = parse(ok);
  EXPECT_TRUE(matches(long_ok, std::string(2000, 'a') + "b"));
}

}  // namespace
}  // namespace pagoda::structured
