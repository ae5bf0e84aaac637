// ChatOutputParser on recorded replies of each tool-call family (well-formed, several calls,
// text around them, malformed and cut-off calls, thinking), and streamed: every split of the
// reply into pieces gives the same reasoning, content and calls as the whole reply at once.
#include "model/text/chat_output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace pagoda::model {
namespace {

struct Want {
  std::string reasoning;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments (compared as JSON)
};

struct Case {
  const char* name;
  ToolSyntax tools;
  ReasoningSyntax reasoning;
  std::string reply;
  Want want;
};

std::vector<Case> cases() {
  using T = ToolSyntax;
  using R = ReasoningSyntax;
  return {
      {"hermes one call", T::kHermes, R::kNone, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       {"", "", {{"get_weather", R"({"city":"Paris"})"}}}},
      {"hermes text then two calls", T::kHermes, R::kNone,
       "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
       "\"arguments\": \"{\\\"x\\\": [1, 2]}\"}\n</tool_call>",
       {"", "Let me check.\n", {{"a", "{}"}, {"b", R"({"x":[1,2]})"}}}},
      {"hermes malformed call is text", T::kHermes, R::kNone, "<tool_call>\n{\"name\": \"a\", \"arguments\": {oops}\n</tool_call> done",
       {"", "<tool_call>\n{\"name\": \"a\", \"arguments\": {oops}\n</tool_call> done", {}}},
      {"hermes call without name is text", T::kHermes, R::kNone, "<tool_call>{\"arguments\": {}}</tool_call>",
       {"", "<tool_call>{\"arguments\": {}}</tool_call>", {}}},
      {"hermes cut off", T::kHermes, R::kNone, "ok <tool_call>\n{\"name\": \"a\", \"argu",
       {"", "ok <tool_call>\n{\"name\": \"a\", \"argu", {}}},
      {"hermes lookalike marker", T::kHermes, R::kNone, "a <tool_cal b <tool_callx",
       {"", "a <tool_cal b <tool_callx", {}}},
      {"think then answer", T::kNone, R::kThink, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.",
       {"\nHmm, 2+2.\n", "It is 4.", {}}},
      {"think then call", T::kHermes, R::kThink,
       "<think>need weather</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": 1}}\n</tool_call>",
       {"need weather", "", {{"w", R"({"c":1})"}}}},
      {"unterminated think", T::kNone, R::kThink, "<think>still going", {"still going", "", {}}},
      {"no think tag", T::kNone, R::kThink, "Plain <think> later", {"", "Plain <think> later", {}}},
      {"think off", T::kNone, R::kNone, "<think>x</think>y", {"", "<think>x</think>y", {}}},
      {"llama3 json reply", T::kLlama3, R::kNone, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
       {"", "", {{"add", R"({"a":1,"b":2})"}}}},
      {"llama3 python tag, two calls", T::kLlama3, R::kNone,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"x;y\"}}; {\"name\": \"b\", \"parameters\": {}}",
       {"", "", {{"a", R"({"s":"x;y"})"}, {"b", "{}"}}}},
      {"llama3 json that is not a call", T::kLlama3, R::kNone, "{\"answer\": 4}", {"", "{\"answer\": 4}", {}}},
      {"llama3 prose", T::kLlama3, R::kNone, "It is {probably} 4.", {"", "It is {probably} 4.", {}}},
      {"mistral calls", T::kMistral, R::kNone,
       "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"q\": \"z\"}}, {\"name\": \"b\", \"arguments\": {}}]",
       {"", "", {{"a", R"({"q":"z"})"}, {"b", "{}"}}}},
      {"mistral broken", T::kMistral, R::kNone, "Sure [TOOL_CALLS] [{\"name\": 3}]", {"", "Sure [TOOL_CALLS] [{\"name\": 3}]", {}}},
      {"deepseek v3.1 two calls after text", T::kDeepSeek, R::kNone,
       "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Zürich\"}"
       "<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {"", "Checking.", {{"get_weather", R"({"city":"Zürich"})"}, {"add", R"({"a":1})"}}}},
      {"deepseek v3 fenced call", T::kDeepSeek, R::kNone,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {"", "", {{"get_weather", R"({"city":"Paris"})"}}}},
      {"deepseek thinking, then a call cut before the block's end", T::kDeepSeek, R::kThink,
       "<think>weather needed</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>w<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
       {"weather needed", "", {{"w", "{}"}}}},
      {"deepseek malformed arguments are text", T::kDeepSeek, R::kNone,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>w<｜tool▁sep｜>{oops}<｜tool▁call▁end｜><｜tool▁calls▁end｜> so",
       {"", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>w<｜tool▁sep｜>{oops}<｜tool▁call▁end｜><｜tool▁calls▁end｜> so", {}}},
      {"deepseek call cut off", T::kDeepSeek, R::kNone,
       "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>w<｜tool▁sep｜>{\"a\"",
       {"", "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>w<｜tool▁sep｜>{\"a\"", {}}},
      {"deepseek call without a name is text", T::kDeepSeek, R::kNone,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {"", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", {}}},
      {"no tools", T::kNone, R::kNone, "<tool_call>{\"name\": \"a\"}</tool_call>", {"", "<tool_call>{\"name\": \"a\"}</tool_call>", {}}},
      {"empty", T::kHermes, R::kThink, "", {"", "", {}}},
      {"whitespace", T::kHermes, R::kThink, " \n", {"", " \n", {}}},
  };
}

ChatDelta parse_in_pieces(const Case& c, const std::vector<size_t>& cuts) {
  ChatOutputParser p(c.tools, c.reasoning, "x");
  ChatDelta all;
  size_t at = 0;
  for (size_t cut : cuts) {
    ChatDelta d;
    p.push(std::string_view(c.reply).substr(at, cut - at), d);
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (auto& call : d.calls) all.calls.push_back(call);
    at = cut;
  }
  ChatDelta d;
  p.push(std::string_view(c.reply).substr(at), d);
  p.finish(d);
  all.reasoning += d.reasoning;
  all.content += d.content;
  for (auto& call : d.calls) all.calls.push_back(call);
  return all;
}

void expect(const Case& c, const ChatDelta& got) {
  EXPECT_EQ(got.reasoning, c.want.reasoning);
  EXPECT_EQ(got.content, c.want.content);
  ASSERT_EQ(got.calls.size(), c.want.calls.size());
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, c.want.calls[i].first);
    EXPECT_EQ(nlohmann::json::parse(got.calls[i].arguments), nlohmann::json::parse(c.want.calls[i].second));
    EXPECT_EQ(got.calls[i].id, "call_x_" + std::to_string(i));
  }
}

TEST(ChatOutputParser, RecordedRepliesOfEachFamily) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    expect(c, parse_in_pieces(c, {}));
  }
}

TEST(ChatOutputParser, EverySplitStreamsTheSameAnswer) {
  uint64_t state = 5;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<size_t> bytes;  // one byte at a time
    for (size_t i = 1; i < c.reply.size(); ++i) bytes.push_back(i);
    expect(c, parse_in_pieces(c, bytes));
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < c.reply.size(); ++i) {
        if (next() % 4 == 0) cuts.push_back(i);
      }
      expect(c, parse_in_pieces(c, cuts));
    }
  }
}

// Streamed content never shows part of a marker: what is emitted before the reply ends is a
// prefix of the final content.
TEST(ChatOutputParser, StreamedContentNeverShowsHalfAMarker) {
  ChatOutputParser p(ToolSyntax::kHermes, ReasoningSyntax::kThink, "x");
  ChatDelta d;
  for (char ch : std::string("Hi <tool_c")) p.push(std::string(1, ch), d);
  EXPECT_EQ(d.content, "Hi ");
  p.push("all>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", d);
  EXPECT_EQ(d.content, "Hi ");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(p.num_calls(), 1);
}

}  // namespace
}  // namespace pagoda::model
