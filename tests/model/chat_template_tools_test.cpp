// Conversations with tools rendered as Qwen 3's, Llama 3.1's and DeepSeek-V3.1's own templates
// render them (DeepSeek's with its documented tools section in the system prompt): the
// expected texts in tests/data/chat_tools_reference.json come from Jinja over those templates
// (tests/model/chat_tools_reference.py); and a rendered call parses back into the same call.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "model/text/chat_output.h"
#include "model/text/chat_template.h"

namespace pagoda::model {
namespace {

using ojson = nlohmann::ordered_json;

ojson reference() {
  std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/tests/data/chat_tools_reference.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ojson::parse(ss.str());
}

std::vector<ChatTool> tools() {
  const ojson spec = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city, now.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
      "a": {"type": "number"}, "b": {"type": "integer", "default": 2.0}}}}}])");
  auto t = chat_tools_from_json(spec);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return *t;
}

ChatMessage msg(std::string role, std::string content) { return ChatMessage{std::move(role), std::move(content), {}, {}}; }

std::map<std::string, std::vector<ChatMessage>> conversations() {
  const ChatToolCall weather{"call_1", "get_weather", R"({"city":"Zürich","unit":"c"})"};
  const ChatToolCall add{"call_2", "add", R"({"a": 1, "b": 2})"};
  ChatMessage call = msg("assistant", "");
  call.tool_calls = {weather};
  ChatMessage two = msg("assistant", "Checking.");
  two.tool_calls = {weather, add};
  ChatMessage result = msg("tool", R"({"temp": 3})");
  result.tool_call_id = "call_1";
  return {
      {"offer", {msg("system", "Be brief."), msg("user", "Weather in Zürich?")}},
      {"nosystem", {msg("user", "Weather in Zürich?")}},
      {"loop", {msg("user", "Weather in Zürich?"), call, result}},
      {"twocalls", {msg("user", "Both?"), two, msg("tool", "3 C"), msg("tool", "3")}},
  };
}

TEST(ChatTemplateTools, HermesAndLlama3RenderAsTheirReferenceTemplates) {
  const ojson want = reference();
  const std::vector<ChatTool> offered = tools();
  ChatRenderOptions options;
  options.tools = &offered;
  ChatTemplate hermes(ChatFamily::kChatML, "", "<|im_end|>");
  hermes.set_syntax(ToolSyntax::kHermes, ReasoningSyntax::kThink);
  ChatTemplate llama3(ChatFamily::kLlama3, "<|begin_of_text|>", "<|eot_id|>");
  llama3.set_syntax(ToolSyntax::kLlama3, ReasoningSyntax::kNone);
  ChatTemplate deepseek(ChatFamily::kDeepSeek, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  deepseek.set_syntax(ToolSyntax::kDeepSeek, ReasoningSyntax::kThink);
  int compared = 0;
  for (const auto& [name, messages] : conversations()) {
    for (const auto& [family, chat] : {std::pair<std::string, const ChatTemplate*>{"hermes", &hermes}, {"llama3", &llama3},
                                       {"deepseek", &deepseek}}) {
      const std::string key = family + "/" + name;
      if (!want.contains(key)) continue;
      SCOPED_TRACE(key);
      auto got = chat->render(messages, true, options);
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      EXPECT_EQ(*got, want[key].get<std::string>());
      ++compared;
    }
  }
  EXPECT_EQ(compared, 11);
  ChatRenderOptions nothink;
  nothink.enable_thinking = false;
  auto got = hermes.render(conversations()["nosystem"], true, nothink);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, want["hermes/nothink"].get<std::string>());
  // DeepSeek: thinking opens the block; answered turns drop earlier reasoning.
  ChatRenderOptions think;
  think.enable_thinking = true;
  got = deepseek.render(conversations()["nosystem"], true, think);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, want["deepseek/think"].get<std::string>());
  EXPECT_EQ(deepseek.reply_opening(think), "<think>");
  EXPECT_EQ(deepseek.reply_opening(nothink), "");
  EXPECT_EQ(hermes.reply_opening(think), "");
  std::vector<ChatMessage> answered = conversations()["loop"];
  for (const auto& [role, content] : std::vector<std::pair<std::string, std::string>>{
           {"assistant", "3 degrees."}, {"user", "Thanks."}, {"assistant", "<think>ok</think>You're welcome."},
           {"user", "Bye."}}) {
    answered.push_back(msg(role, content));
  }
  got = deepseek.render(answered, true, {});
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(*got, want["deepseek/turns"].get<std::string>());
}

TEST(ChatTemplateTools, FamiliesWithoutToolSyntaxRefuse) {
  const std::vector<ChatTool> offered = tools();
  ChatRenderOptions options;
  options.tools = &offered;
  ChatTemplate gemma(ChatFamily::kGemma, "<bos>", "<eos>");
  auto r = gemma.render({msg("user", "hi")}, true, options);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tools"), std::string::npos) << r.status().message();
  ChatMessage result = msg("tool", "3");
  EXPECT_FALSE(gemma.render({msg("user", "hi"), msg("assistant", "x"), result}).is_ok());  // a tool turn, no syntax
  EXPECT_FALSE(gemma.render({msg("user", "hi")}, true, ChatRenderOptions{nullptr, false, ""}).is_ok());  // no thinking
  ChatTemplate llama3(ChatFamily::kLlama3, "<|begin_of_text|>", "<|eot_id|>");
  llama3.set_syntax(ToolSyntax::kLlama3, ReasoningSyntax::kNone);
  ChatMessage two = msg("assistant", "");
  two.tool_calls = {{"a", "add", "{}"}, {"b", "add", "{}"}};
  EXPECT_FALSE(llama3.render({msg("user", "x"), two}, true, options).is_ok());  // one call per message there
  ChatMessage bad = msg("assistant", "");
  bad.tool_calls = {{"a", "add", "[1]"}};
  EXPECT_FALSE(llama3.render({msg("user", "x"), bad}, true, options).is_ok());  // arguments not an object
}

TEST(ChatTemplateTools, SyntaxFollowsTheTemplate) {
  EXPECT_EQ(tool_syntax_for(ChatFamily::kChatML, "{{ '<tool_call>' }} <|im_start|>", false), ToolSyntax::kHermes);
  EXPECT_EQ(tool_syntax_for(ChatFamily::kChatML, "<|im_start|> no tools", false), ToolSyntax::kNone);
  EXPECT_EQ(tool_syntax_for(ChatFamily::kChatML, "", false), ToolSyntax::kHermes);  // the fallback template
  EXPECT_EQ(tool_syntax_for(ChatFamily::kLlama3, "x", false), ToolSyntax::kLlama3);
  EXPECT_EQ(tool_syntax_for(ChatFamily::kMistral, "x", true), ToolSyntax::kMistral);
  EXPECT_EQ(tool_syntax_for(ChatFamily::kMistral, "x", false), ToolSyntax::kNone);
  EXPECT_EQ(tool_syntax_for(ChatFamily::kGemma, "x", true), ToolSyntax::kNone);
  EXPECT_EQ(tool_syntax_for(ChatFamily::kDeepSeek, "x", false), ToolSyntax::kDeepSeek);
  EXPECT_EQ(detect_chat_template("{{'<｜User｜>' + content}}{{'<｜Assistant｜>'}}"), ChatFamily::kDeepSeek);
  EXPECT_EQ(chat_family_from_name("deepseek"), ChatFamily::kDeepSeek);
  EXPECT_EQ(tool_syntax_from_name("deepseek"), ToolSyntax::kDeepSeek);
  EXPECT_EQ(reasoning_syntax_for("{{ '<think>\\n' }} ... </think>"), ReasoningSyntax::kThink);
  EXPECT_EQ(reasoning_syntax_for("<|im_start|>"), ReasoningSyntax::kNone);
}

// Render a call, take the assistant's text, parse it: the same call comes back.
TEST(ChatTemplateTools, RenderedCallsParseBack) {
  const std::vector<ChatTool> offered = tools();
  ChatRenderOptions options;
  options.tools = &offered;
  for (ToolSyntax syntax : {ToolSyntax::kHermes, ToolSyntax::kLlama3, ToolSyntax::kDeepSeek}) {
    const bool hermes = syntax == ToolSyntax::kHermes, deepseek = syntax == ToolSyntax::kDeepSeek;
    ChatTemplate chat(hermes     ? ChatFamily::kChatML
                      : deepseek ? ChatFamily::kDeepSeek
                                 : ChatFamily::kLlama3,
                      "", deepseek ? "<｜end▁of▁sentence｜>" : "");
    chat.set_syntax(syntax, ReasoningSyntax::kNone);
    ChatMessage call = msg("assistant", "");
    call.tool_calls = {{"x", "get_weather", R"({"city": "Zürich", "unit": "c"})"}};
    auto with = chat.render({msg("user", "q"), call}, false, options);
    auto without = chat.render({msg("user", "q")}, true, options);
    ASSERT_TRUE(with.is_ok() && without.is_ok());
    ASSERT_EQ(with->compare(0, without->size(), *without), 0);
    std::string reply = with->substr(without->size());
    reply = reply.substr(0, reply.find(hermes ? "<|im_end|>" : deepseek ? "<｜end▁of▁sentence｜>" : "<|eot_id|>"));
    ChatOutputParser parser(syntax, ReasoningSyntax::kNone, "t");
    ChatDelta d;
    parser.push(reply, d);
    parser.finish(d);
    ASSERT_EQ(d.calls.size(), 1u) << reply;
    EXPECT_EQ(d.calls[0].name, "get_weather");
    EXPECT_EQ(ojson::parse(d.calls[0].arguments), ojson::parse(call.tool_calls[0].arguments));
    EXPECT_EQ(d.content, "");
  }
}

}  // namespace
}  // namespace pagoda::model
