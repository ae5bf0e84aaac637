// Request parsing: types, ranges, defaults, unknown fields, and the per-request limits.
#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace pagoda::server {
namespace {

RequestLimits limits() {
  RequestLimits l;
  l.vocab_size = 512;
  l.max_context = 256;
  l.max_choices = 8;
  l.max_total_tokens = 1000;
  return l;
}

// The field an invalid body is blamed on ("" when it parses).
std::string bad_param(const std::string& body, bool chat = false) {
  std::string param;
  auto r = chat ? parse_chat_request(body, limits(), &param) : parse_completion_request(body, limits(), &param);
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(r.status().message().empty());
  return param.empty() ? "<body>" : param;
}

ApiRequest completion(const std::string& body) {
  auto r = parse_completion_request(body, limits());
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : ApiRequest{};
}

ApiRequest chat(const std::string& body) {
  auto r = parse_chat_request(body, limits());
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : ApiRequest{};
}

TEST(OpenAiRequest, CompletionDefaultsFollowOpenAi) {
  const ApiRequest r = completion(R"({"prompt": "hello"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "hello");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.has_seed);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.model.empty());
}

TEST(OpenAiRequest, PromptShapes) {
  EXPECT_EQ(completion(R"({"prompt": ["a", "b", "c"]})").prompts.size(), 3u);
  const ApiRequest ids = completion(R"({"prompt": [1, 2, 511]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_TRUE(ids.prompts[0].is_tokens);
  EXPECT_EQ(ids.prompts[0].tokens, (std::vector<int32_t>{1, 2, 511}));
  EXPECT_EQ(completion(R"({"prompt": [[1, 2], [3]]})").prompts.size(), 2u);
  EXPECT_EQ(bad_param(R"({"prompt": [1, 512]})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": [-1]})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": [1.5]})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": []})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": [[]]})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": 7})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": [{"a": 1}]})"), "prompt");
  EXPECT_EQ(bad_param(R"({"max_tokens": 3})"), "prompt");  // required
}

TEST(OpenAiRequest, MalformedBodies) {
  EXPECT_EQ(bad_param(""), "<body>");
  EXPECT_EQ(bad_param("{"), "<body>");
  EXPECT_EQ(bad_param("[1, 2]"), "<body>");
  EXPECT_EQ(bad_param("\"prompt\""), "<body>");
  EXPECT_EQ(bad_param("{\"prompt\": \"\xc3\x28\"}"), "<body>");  // ill-formed UTF-8
  EXPECT_EQ(bad_param("{\"prompt\": \"a\"} trailing"), "<body>");
}

TEST(OpenAiRequest, TypesAndRanges) {
  EXPECT_EQ(bad_param(R"({"prompt": "a", "temperature": "1"})"), "temperature");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "temperature": 2.5})"), "temperature");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "temperature": -0.1})"), "temperature");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "top_p": 0})"), "top_p");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "top_p": 1.5})"), "top_p");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "top_k": 2.0})"), "top_k");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "min_p": 2})"), "min_p");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "n": 0})"), "n");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "n": 9})"), "n");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "n": true})"), "n");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "max_tokens": -5})"), "max_tokens");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "max_tokens": 257})"), "max_tokens");  // beyond the context
  EXPECT_EQ(bad_param(R"({"prompt": "a", "max_tokens": 18446744073709551615})"), "max_tokens");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "max_tokens": "16"})"), "max_tokens");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "stream": "yes"})"), "stream");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "stream_options": {"include_usage": 1}})"), "stream_options.include_usage");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "stop": 5})"), "stop");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "stop": ["x", 5]})"), "stop");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "stop": [""]})"), "stop");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "stop_token_ids": [600]})"), "stop_token_ids");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "seed": "7"})"), "seed");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "priority": 1e10})"), "priority");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "cache_salt": ""})"), "cache_salt");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "model": 3})"), "model");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logprobs": 21})"), "logprobs");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logprobs": true})"), "logprobs");
}

TEST(OpenAiRequest, ValuesAreRead) {
  const ApiRequest r = completion(R"({"prompt": "a", "model": "m", "temperature": 0, "top_p": 0.5, "top_k": 3,
      "min_p": 0.2, "seed": -1, "n": 2, "stream": true, "stream_options": {"include_usage": true},
      "stop": "END", "stop_token_ids": [2], "priority": -4, "cache_salt": "t", "ignore_eos": true,
      "logprobs": 3, "max_tokens": 100, "repetition_penalty": 1.1})");
  EXPECT_EQ(r.model, "m");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.2f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(r.priority, -4);
  EXPECT_EQ(r.cache_salt, "t");
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.max_tokens, 100);
}

TEST(OpenAiRequest, UnknownFieldsAndNullsAreIgnored) {
  const ApiRequest r = completion(R"({"prompt": "a", "user": "u1", "x_custom": {"deep": [1, 2]}, "temperature": null,
      "stop": null, "seed": null, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "echo": false})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.has_seed);
}

TEST(OpenAiRequest, UnsupportedFeaturesAreErrorsNotSilence) {
  EXPECT_EQ(bad_param(R"({"prompt": "a", "echo": true})"), "echo");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "suffix": "end"})"), "suffix");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "best_of": 3})"), "best_of");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", true), "tools[0].type");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "tools": [{}]})"), "tools");  // a chat field
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})", true),
            "response_format");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})", true),
            "response_format.json_schema.schema");
  // Found by fuzz/openai_request: a non-string "type" threw out of the parser.
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": 1e308}})", true),
            "response_format");
}

TEST(OpenAiRequest, ResponseFormatsKeepTheSchemaOrder) {
  const ApiRequest obj = chat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})");
  EXPECT_EQ(obj.response_format, ResponseFormat::kJsonObject);
  const ApiRequest s = chat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
      "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"z": {}, "a": {}}}}}})");
  EXPECT_EQ(s.response_format, ResponseFormat::kJsonSchema);
  std::vector<std::string> keys;
  for (auto it = s.reply_schema["properties"].begin(); it != s.reply_schema["properties"].end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a"}));  // as sent, not sorted
  const ApiRequest text = completion(R"({"prompt": "a", "response_format": {"type": "text"}})");
  EXPECT_EQ(text.response_format, ResponseFormat::kText);
  EXPECT_EQ(completion(R"({"prompt": "a", "response_format": {"type": "json_object"}})").response_format, ResponseFormat::kJsonObject);
  EXPECT_EQ(bad_param(R"({"prompt": "a", "guided_json": {}})"), "guided_json");
  // GBNF, regex and choice constraints (compiled by the handler; here only read).
  const ApiRequest g = completion(R"({"prompt": "a", "grammar": "root ::= \"a\""})");
  EXPECT_EQ(g.response_format, ResponseFormat::kGrammar);
  EXPECT_EQ(g.reply_constraint, "root ::= \"a\"");
  EXPECT_EQ(g.reply_constraint_param, "grammar");
  const ApiRequest re = chat(R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"regex": "a+"}})");
  EXPECT_EQ(re.response_format, ResponseFormat::kRegex);
  EXPECT_EQ(re.reply_constraint_param, "structured_outputs.regex");
  const ApiRequest ch = completion(R"({"prompt": "a", "guided_choice": ["x", "", "y z"]})");
  EXPECT_EQ(ch.response_format, ResponseFormat::kChoice);
  EXPECT_EQ(ch.reply_choices, (std::vector<std::string>{"x", "", "y z"}));
  EXPECT_EQ(bad_param(R"({"prompt": "a", "grammar": ""})"), "grammar");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "guided_regex": ["a"]})"), "guided_regex");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "guided_choice": [1]})"), "guided_choice");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "grammar": "root ::= \"a\"", "guided_choice": ["a"]})"), "guided_choice");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "structured_outputs": "a+"})"), "structured_outputs");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "structured_outputs": {"json": {}}})"), "structured_outputs.json");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "guided_regex": "a", "response_format": {"type": "json_object"}})"), "response_format");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "grammar": ")" + std::string(70000, 'x') + R"("})"), "grammar");
}

TEST(OpenAiRequest, PenaltiesAndLogitBias) {
  const ApiRequest r = completion(R"({"prompt": "a", "presence_penalty": 0.5, "frequency_penalty": -1.25,
      "logit_bias": {"7": -100, "3": 2.5, "0": 100}})");
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.25f);
  const std::vector<std::pair<int32_t, float>> want = {{0, 100.0f}, {3, 2.5f}, {7, -100.0f}};
  EXPECT_EQ(r.sampling.logit_bias, want);  // ascending ids, as the sampler requires
  EXPECT_TRUE(r.sampling.validate().is_ok());
  EXPECT_EQ(bad_param(R"({"prompt": "a", "presence_penalty": 2.5})"), "presence_penalty");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "frequency_penalty": "1"})"), "frequency_penalty");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": {"5": 101}})"), "logit_bias");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": {"-1": 1}})"), "logit_bias");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": {"x": 1}})"), "logit_bias");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": {"99999999999": 1}})"), "logit_bias");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": {"1": "2"}})"), "logit_bias");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": [1]})"), "logit_bias");
  EXPECT_EQ(bad_param(R"({"prompt": "a", "logit_bias": {"01": 1, "1": 2}})"), "logit_bias");  // one id twice
}

TEST(OpenAiRequest, ChoiceAndTokenBudgets) {
  EXPECT_EQ(bad_param(R"({"prompt": ["a", "b", "c"], "n": 3})"), "n");       // 9 choices > 8
  EXPECT_EQ(bad_param(R"({"prompt": "a", "n": 8, "max_tokens": 200})"), "max_tokens");  // 1600 > 1000
  EXPECT_EQ(completion(R"({"prompt": "a", "n": 4, "max_tokens": 250})").n, 4);            // exactly 1000
  EXPECT_EQ(bad_param(R"({"prompt": "a", "n": 2, "best_of": 2})"), "");
}

TEST(OpenAiRequest, ChatMessagesAndFields) {
  auto r = parse_chat_request(R"({"messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}], "max_completion_tokens": 12, "max_tokens": 99,
      "logprobs": true, "top_logprobs": 4})", limits());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "Hi there");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_EQ(r->max_tokens, 12);
  EXPECT_EQ(r->logprobs, 4);
  EXPECT_TRUE(r->chat);

  auto defaults = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})", limits());
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_EQ(defaults->max_tokens, 256);  // the context (clipped by the engine)
  EXPECT_EQ(defaults->logprobs, -1);

  EXPECT_EQ(bad_param(R"({"messages": []})", true), "messages");
  EXPECT_EQ(bad_param(R"({"messages": "hi"})", true), "messages");
  EXPECT_EQ(bad_param(R"({})", true), "messages");
  EXPECT_EQ(bad_param(R"({"messages": [{"content": "x"}]})", true), "messages[0].role");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "function", "content": "x"}]})", true), "messages[0].role");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "tool"}]})", true), "messages[0].content");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", true), "messages[0].tool_calls");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user"}]})", true), "messages[0].content");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": 5}]})", true), "messages[0].content");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true),
            "messages[0].content");
  // A part whose type is not a string is refused like any other part (it once threw out of the parser).
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": [{"type": 1e-400, "text": "x"}]}]})", true),
            "messages[0].content");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})", true), "messages[0].content");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true), "top_logprobs");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", true), "logprobs");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", true),
            "max_completion_tokens");
}

}  // namespace
}  // namespace pagoda::server

namespace pagoda::server {
namespace {

TEST(OpenAiRequest, KvSelectIsReadAndChecked) {
  const ApiRequest none = completion(R"({"prompt": "hi"})");
  EXPECT_FALSE(none.kv_select.has_value());
  const ApiRequest h2o = completion(R"({"prompt": "hi", "kv_select": {"method": "h2o", "budget": 64}})");
  ASSERT_TRUE(h2o.kv_select.has_value());
  EXPECT_EQ(h2o.kv_select->describe(), "h2o budget 64 recent 32");  // normalized: the default recent
  const ApiRequest snap =
      completion(R"({"prompt": "hi", "kv_select": {"method": "snapkv", "budget": 100, "recent": 10, "observe": 16}})");
  EXPECT_EQ(snap.kv_select->describe(), "snapkv budget 100 recent 10 observe 16");
  const ApiRequest off = completion(R"({"prompt": "hi", "kv_select": {"method": "off"}})");
  ASSERT_TRUE(off.kv_select.has_value());
  EXPECT_FALSE(off.kv_select->on());
  auto chat = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "kv_select": {"method": "h2o", "budget": 8}})",
                                 limits());
  ASSERT_TRUE(chat.is_ok()) << chat.status().message();
  EXPECT_TRUE(chat->kv_select->on());

  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": "h2o"})"), "kv_select");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "lru", "budget": 8}})"), "kv_select.method");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "", "budget": 8}})"), "kv_select.method");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"budget": 8}})"), "kv_select.method");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "h2o"}})"), "kv_select.budget");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "h2o", "budget": 0}})"), "kv_select");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "h2o", "budget": 8, "recent": 9}})"), "kv_select");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "h2o", "budget": 8, "observe": 2}})"), "kv_select.observe");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "h2o", "budget": -1}})"), "kv_select.budget");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "h2o", "budget": 8, "window": 2}})"), "kv_select.window");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "kv_select": {"method": "off", "budget": 8}})"), "kv_select");
  EXPECT_EQ(bad_param(R"({"messages": [{"role": "user", "content": "x"}], "kv_select": {"method": "snapkv", "budget": 1}})", true),
            "kv_select");
}

}  // namespace
}  // namespace pagoda::server
