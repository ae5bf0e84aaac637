// Tool calls and reasoning through the OpenAI server over a scripted engine: the tools reach
// the prompt as the template renders them, replies come back as tool_calls (whole and
// streamed, the stream reassembling to the whole), tool_choice none / named, the conversation
// round trip, reasoning_content with its token count, and clear 400s.
#include "server/http_server.h"

#include <unistd.h>

#include <filesystem>

#include "hf_writer.h"
#include "model/text/hf_tokenizer.h"
#include "server_fixture.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

// A user question, the assistant's get_weather call (Oslo) and the tool's result.
json weather_call_and_result() {
  return {user("Weather?"),
          {{"role", "assistant"}, {"content", nullptr},
           {"tool_calls", {{{"id", "call_9"}, {"type", "function"},
                            {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Oslo\"}"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "call_9"}, {"content", "sunny, 3 C"}}};
}

class ChatToolsTest : public ServerTest {
 protected:
  void start_with(model::ToolSyntax tools, model::ReasoningSyntax reasoning) {
    context_ = 4096;
    tool_syntax_ = tools;
    reasoning_syntax_ = reasoning;
    start();
  }
  void reply(const std::string& text) { engine_->script_reply(tokenizer_->encode(text, false, false)); }
  std::string last_prompt() const { return tokenizer_->decode(engine_->submitted().back().prompt); }
};

TEST_F(ChatToolsTest, HermesCallComesBackAsToolCalls) {
  start_with(model::ToolSyntax::kHermes, model::ReasoningSyntax::kNone);
  reply("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  // Sent with the tool's keys in the client's order (not sorted), which the prompt keeps.
  nlohmann::ordered_json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                                 {"tools", nlohmann::ordered_json::parse(kTools.dump())}};
  body["tools"][0] = nlohmann::ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");
  auto r = client_->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_FALSE(choice["message"].contains("reasoning_content"));  // no reasoning syntax
  const std::string prompt = last_prompt();
  EXPECT_NE(prompt.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"), std::string::npos);
}

TEST_F(ChatToolsTest, StreamedCallsReassembleToTheWholeReply) {
  start_with(model::ToolSyntax::kHermes, model::ReasoningSyntax::kThink);
  reply("<think>which city</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>");
  const json body = {{"messages", {user("Weather?")}}, {"tools", kTools}};
  auto whole = post("/v1/chat/completions", body);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json message = json::parse(whole->body)["choices"][0]["message"];
  json streamed_body = body;
  streamed_body["stream"] = true;
  streamed_body["stream_options"] = {{"include_usage", true}};
  auto r = post("/v1/chat/completions", streamed_body);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string reasoning, content, finish;
  json calls = json::array();
  int64_t reasoning_tokens = -1;
  for (const json& chunk : parse_sse(r->body).chunks) {
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      reasoning_tokens = chunk["usage"]["completion_tokens_details"]["reasoning_tokens"];
    }
    if (chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    const json& d = c["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const json& t : d["tool_calls"]) {
        const size_t i = t["index"];
        if (i == calls.size()) calls.push_back({{"id", t["id"]}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
        if (t["function"].contains("name")) calls[i]["function"]["name"] = t["function"]["name"];
        calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                            t["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(reasoning, "which city");
  EXPECT_EQ(message["reasoning_content"], reasoning);
  EXPECT_EQ(content, "Checking.\n");
  EXPECT_EQ(message["content"], content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  for (json& c : calls) c.erase("id");  // ids are per response
  json whole_calls = message["tool_calls"];
  for (json& c : whole_calls) c.erase("id");
  EXPECT_EQ(calls, whole_calls);
  EXPECT_GT(reasoning_tokens, 0);
  EXPECT_LT(reasoning_tokens, json::parse(whole->body)["usage"]["completion_tokens"].get<int64_t>());
  EXPECT_EQ(json::parse(whole->body)["usage"]["completion_tokens_details"]["reasoning_tokens"], reasoning_tokens);
}

TEST_F(ChatToolsTest, ToolChoiceNoneAndNamedAndParallel) {
  start_with(model::ToolSyntax::kHermes, model::ReasoningSyntax::kNone);
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
  reply(call);
  auto none = post("/v1/chat/completions", {{"messages", {user("x")}}, {"tools", kTools}, {"tool_choice", "none"}});
  ASSERT_EQ(none->status, 200) << none->body;
  EXPECT_EQ(json::parse(none->body)["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(json::parse(none->body)["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
  EXPECT_NE(last_prompt().find("<tools>"), std::string::npos);  // still offered, as OpenAI does
  // Named: the prompt ends inside that call; the reply continues its arguments.
  reply("{\"city\": \"Lima\"}}\n</tool_call>");
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  auto r = post("/v1/chat/completions", {{"messages", {user("x")}}, {"tools", kTools}, {"tool_choice", named}});
  ASSERT_EQ(r->status, 200) << r->body;
  const json msg = json::parse(r->body)["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Lima"}}));
  const std::string prompt = last_prompt();
  const std::string forced = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  EXPECT_EQ(prompt.substr(prompt.size() - forced.size()), forced);
  // parallel_tool_calls false: the first call only.
  reply(call + "\n" + call);
  auto one = post("/v1/chat/completions", {{"messages", {user("x")}}, {"tools", kTools}, {"parallel_tool_calls", false}});
  ASSERT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["choices"][0]["message"]["tool_calls"].size(), 1u);
}

TEST_F(ChatToolsTest, ConversationRoundTripsIntoThePrompt) {
  start_with(model::ToolSyntax::kHermes, model::ReasoningSyntax::kNone);
  reply("Sunny.");
  const json messages = weather_call_and_result();
  auto r = post("/v1/chat/completions", {{"messages", messages}, {"tools", kTools}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "Sunny.");
  EXPECT_EQ(json::parse(r->body)["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(last_prompt().find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                               "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny, 3 C\n</tool_response><|im_end|>\n"),
            std::string::npos)
      << last_prompt();
}

TEST_F(ChatToolsTest, ClearErrors) {
  start_with(model::ToolSyntax::kHermes, model::ReasoningSyntax::kNone);
  auto bad = [&](const json& body, const std::string& param) {
    auto r = post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body.dump() << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    if (!param.empty()) {
      EXPECT_EQ(e["param"], param) << r->body;
    }
  };
  const json m = {user("x")};
  bad({{"messages", m}, {"tools", {{{"type", "retrieval"}}}}}, "tools[0].type");
  bad({{"messages", m}, {"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}}, "tools[0].function.name");
  bad({{"messages", m}, {"tools", kTools}, {"tool_choice", "always"}}, "tool_choice");
  bad({{"messages", m}, {"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}, "tool_choice");
  bad({{"messages", m}, {"tool_choice", "required"}}, "tool_choice");
  bad({{"messages", m}, {"chat_template_kwargs", {{"tools_in_user_message", false}}}}, "chat_template_kwargs.tools_in_user_message");
  bad({{"messages", m}, {"chat_template_kwargs", {{"enable_thinking", false}}}}, "");  // this template does not think
  bad({{"messages", m}, {"reasoning_effort", "high"}}, "");
  bad({{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}}}}},
      "messages[0].tool_calls[0].function.arguments");
  bad({{"prompt", "x"}, {"tools", kTools}}, "");  // not on /v1/completions: posted to chat here, so "messages" is missing
  auto completions = post("/v1/completions", {{"prompt", "x"}, {"tools", kTools}});
  EXPECT_EQ(completions->status, 400);
}

// DeepSeek-V3.1's template: thinking on (its `thinking` kwarg) opens <think> in the prompt, so
// the reply's reasoning has no opening tag; calls in its syntax; a named tool_choice ends the
// prompt inside that call; tool results round-trip as tool outputs.
TEST_F(ChatToolsTest, DeepSeekThinkingCallsAndNamedChoice) {
  tool_syntax_ = model::ToolSyntax::kDeepSeek;
  reasoning_syntax_ = model::ReasoningSyntax::kThink;
  context_ = 4096;
  // A byte-level vocabulary, as DeepSeek's is: stories260K's SentencePiece decodes ▁ as a space.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pagoda-deepseek-tok-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  write_byte_level_tokenizer(dir.string());
  auto hf = model::load_hf_tokenizer(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(hf.is_ok()) << hf.status().message();
  tokenizer_ = std::make_shared<const model::Tokenizer>(std::move(hf->tokenizer));
  start({}, 8, server::ChatFamily::kDeepSeek);
  reply("which city</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  auto r = post("/v1/chat/completions",
                {{"messages", {user("Weather?")}}, {"tools", kTools}, {"chat_template_kwargs", {{"thinking", true}}}});
  ASSERT_EQ(r->status, 200) << r->body;
  json choice = json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["reasoning_content"], "which city");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Oslo"}}));
  std::string prompt = last_prompt();
  EXPECT_NE(prompt.find("## Tools\nYou have access to the following tools:\n\n### get_weather\nDescription: Weather now"),
            std::string::npos) << prompt;
  const std::string opened = "<｜User｜>Weather?<｜Assistant｜><think>";
  EXPECT_EQ(prompt.substr(prompt.size() - opened.size()), opened);
  // Named, thinking off (the template's default): the prompt ends inside the call.
  reply("{\"city\": \"Lima\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  r = post("/v1/chat/completions", {{"messages", {user("x")}}, {"tools", kTools}, {"tool_choice", named}});
  ASSERT_EQ(r->status, 200) << r->body;
  choice = json::parse(r->body)["choices"][0];
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Lima"}}));
  prompt = last_prompt();
  const std::string forced = "<｜Assistant｜><think></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>";
  EXPECT_EQ(prompt.substr(prompt.size() - forced.size()), forced) << prompt;
  // The call and its result round-trip into the next prompt.
  reply("Sunny.");
  const json messages = weather_call_and_result();
  r = post("/v1/chat/completions", {{"messages", messages}, {"tools", kTools}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "Sunny.");
  prompt = last_prompt();
  const std::string tail = "<｜User｜>Weather?<｜Assistant｜><think></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
                           "<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜></s>"
                           "<｜tool▁output▁begin｜>sunny, 3 C<｜tool▁output▁end｜>";
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail) << prompt;
}

TEST_F(ChatToolsTest, TemplatesWithoutToolSyntaxRefuseTools) {
  start_with(model::ToolSyntax::kNone, model::ReasoningSyntax::kNone);
  auto r = post("/v1/chat/completions", {{"messages", {user("x")}}, {"tools", kTools}});
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("no tool calling"), std::string::npos) << r->body;
  // tool_choice none still lists the tools, so it is refused as well; no tools at all is fine.
  auto plain = post("/v1/chat/completions", {{"messages", {user("x")}}, {"max_tokens", 2}});
  EXPECT_EQ(plain->status, 200);
}

}  // namespace
}  // namespace pagoda::testing
