// Structured outputs on the real engine (stories260K, which knows no JSON): with response_format
// json_schema or json_object, every one of n = 8 choices sampled at temperature 1 is JSON that
// validates against its schema (the independent reference of tests/structured/), whole and
// streamed, in batched steps beside unconstrained requests; unsupported schemas are 400s. GBNF
// grammars, regular expressions and choices constrain every sample the same way on both
// endpoints (checked against std::regex), and bad ones are 400s naming the field.
#include <regex>
#include <set>
#include <thread>

#include "real_server.h"
#include "engine/serving_test_util.h"
#include "model/text/chat_output.h"
#include "server/grammar_constraint.h"
#include "structured/json_reference.h"
#include "structured/json_schema.h"
#include "structured/gbnf.h"
#include "structured/matcher.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
        "happy": {"type": "boolean"}, "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
        "required": ["name", "age", "happy"], "additionalProperties": false})",
    R"({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "tag": {"anyOf":
        [{"type": "null"}, {"type": "string", "maxLength": 5}]}}, "required": ["x"]}, "minItems": 1, "maxItems": 3})",
    // $ref without recursion: a recursive schema (covered by tests/structured) lets a model that
    // knows no JSON nest past any max_tokens.
    R"({"$defs": {"pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer"}},
        "required": ["kind"]}}, "type": "object", "properties": {"first": {"$ref": "#/$defs/pet"},
        "second": {"anyOf": [{"$ref": "#/$defs/pet"}, {"type": "null"}]}}, "required": ["first", "second"]})",
};

class StructuredOutputTest : public RealServerTest {};

std::string chat_body(const json& format, int n, uint64_t seed, bool stream = false) {
  // Built as text so the schema keeps its key order.
  return R"({"messages": [{"role": "user", "content": "Tell me about Tom."}], "max_tokens": 300, "temperature": 1.0,
      "n": )" + std::to_string(n) + R"(, "seed": )" + std::to_string(seed) + (stream ? R"(, "stream": true)" : "") +
         R"(, "response_format": )" + format.dump() + "}";
}

json schema_format(const char* schema) {
  return json{{"type", "json_schema"}, {"json_schema", {{"name", "reply"}, {"strict", true}, {"schema", json::parse(schema)}}}};
}

TEST_F(StructuredOutputTest, EverySampledReplyValidates) {
  int checked = 0;
  for (const char* schema : kSchemas) {
    SCOPED_TRACE(schema);
    // Ordered: the reference checks property order as the schema gives it.
    const ojson ordered = ojson::parse(schema);
    std::string body = chat_body(json::object(), 8, 11);
    body.replace(body.rfind("{}"), 2, R"({"type": "json_schema", "json_schema": {"name": "reply", "strict": true, "schema": )" +
                                          ordered.dump() + "}}");
    auto r = client_->Post("/v1/chat/completions", body, "application/json");
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    ASSERT_EQ(j["choices"].size(), 8u);
    std::set<std::string> distinct;
    for (const json& c : j["choices"]) {
      const std::string text = c["message"]["content"];
      EXPECT_EQ(c["finish_reason"], "stop") << text;
      EXPECT_TRUE(reference_accepts(ordered, text)) << text;
      distinct.insert(text);
      ++checked;
    }
    EXPECT_GT(distinct.size(), 1u);  // sampled, not one forced answer
  }
  EXPECT_EQ(checked, 24);
  expect_idle_and_intact();
}

TEST_F(StructuredOutputTest, JsonObjectStreamedAndBesideUnconstrainedRequests) {
  // An unconstrained request in the same batches.
  std::thread free_text([&] {
    auto r = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}});
    EXPECT_EQ(r->status, 200);
    EXPECT_FALSE(json::parse(r->body)["choices"][0]["text"].get<std::string>().empty());
  });
  auto r = client_->Post("/v1/chat/completions", chat_body(json{{"type", "json_object"}}, 4, 5, /*stream=*/true),
                         "application/json");
  free_text.join();
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> texts(4);
  std::vector<std::string> finish(4);
  size_t pos = 0;
  while ((pos = r->body.find("data: {", pos)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", pos);
    const json chunk = json::parse(r->body.substr(pos + 6, end - pos - 6));
    pos = end;
    for (const json& c : chunk["choices"]) {
      const size_t i = c["index"];
      if (c["delta"].contains("content") && c["delta"]["content"].is_string()) texts[i] += c["delta"]["content"].get<std::string>();
      if (c["finish_reason"].is_string()) finish[i] = c["finish_reason"];
    }
  }
  const structured::Grammar object = structured::json_object_grammar();
  for (size_t i = 0; i < 4; ++i) {
    // json_object: any JSON object, so a model that knows no JSON may still be inside a string
    // when max_tokens ends it ("length"): then the text is a prefix the grammar accepts.
    if (finish[i] == "stop") {
      EXPECT_TRUE(ojson::parse(texts[i], nullptr, false).is_object()) << texts[i];
    } else {
      EXPECT_EQ(finish[i], "length");
      structured::MatchState st = structured::initial_state(object);
      EXPECT_TRUE(structured::advance_text(object, st, texts[i])) << texts[i];
    }
  }
  expect_idle_and_intact();
}

TEST_F(StructuredOutputTest, UnsupportedSchemasAreClearErrors) {
  auto r = client_->Post("/v1/chat/completions",
                         chat_body(schema_format(R"({"type": "string", "format": "date"})"), 1, 1), "application/json");
  ASSERT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "response_format");
  EXPECT_NE(r->body.find("format"), std::string::npos);
  auto bad = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                           {"response_format", {{"type", "json_schema"}}}});
  EXPECT_EQ(bad->status, 400);
  auto kind = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                            {"response_format", {{"type", "yaml"}}}});
  EXPECT_EQ(kind->status, 400);
  expect_idle_and_intact();
}

}  // namespace
}  // namespace pagoda::testing

namespace pagoda::testing {
namespace {

// A forced tool call's constraint (what the server attaches for tool_choice required / named:
// server/generate_handler.cpp) on the real engine, with a short prompt so the reply has room:
// every sample (n = 4, temperature 1) is a call of an offered tool whose arguments validate.
TEST_F(StructuredOutputTest, ForcedToolCallsAreCallsWithValidArguments) {
  std::vector<std::string> pieces;
  for (int32_t t = 0; t < tokenizer_->vocab_size(); ++t) pieces.push_back(tokenizer_->token_to_piece(t));
  auto index = std::make_shared<const structured::TokenIndex>(pieces);
  const ojson pick = ojson::parse(R"({"type": "object", "properties": {"c": {"enum": ["r", "b"]}, "n": {"type": "integer"}},
      "required": ["c", "n"]})");
  for (bool named : {false, true}) {
    SCOPED_TRACE(named ? "named" : "required");
    std::vector<structured::CallShape> calls = {{named ? "" : "pick\", \"arguments\": ", pick}};
    if (!named) calls.push_back({"halt\", \"arguments\": ", ojson::parse(R"({"type": "object", "properties": {}, "additionalProperties": false})")});
    auto g = structured::call_grammar(calls, "}\n</tool_call>");
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    auto compiled = std::make_shared<structured::CompiledGrammar>(std::move(g).value(), index);
    engine::CompletionRequest req;
    req.prompt = tokenizer_->encode("Once upon a time", true, false);
    req.max_tokens = 300;
    req.n = 4;
    req.sampling = engine::SamplingParams();
    req.sampling.temperature = 1.0f, req.sampling.top_k = 0, req.sampling.top_p = 1.0f, req.sampling.min_p = 0.0f;
    req.sampling.seed = 9;
    req.stop_token_ids = {tokenizer_->eos_id()};
    req.constraint = std::make_shared<server::GrammarConstraint>(compiled, req.stop_token_ids);
    auto rec = std::make_shared<testing::Recorder>();
    ASSERT_TRUE(serving_->submit(req, rec).is_ok());
    rec->wait();
    ASSERT_TRUE(rec->status().is_ok()) << rec->status().message();
    const std::string forced = named ? "<tool_call>\n{\"name\": \"pick\", \"arguments\": " : "<tool_call>\n{\"name\": \"";
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(rec->choice(i).reason, engine::FinishReason::kStop) << rec->choice(i).text;
      model::ChatOutputParser parser(model::ToolSyntax::kHermes, model::ReasoningSyntax::kNone, "t");
      model::ChatDelta d;
      parser.push(forced + rec->choice(i).text, d);
      parser.finish(d);
      ASSERT_EQ(d.calls.size(), 1u) << forced + rec->choice(i).text;
      const ojson args = ojson::parse(d.calls[0].arguments);
      if (d.calls[0].name == "pick") {
        EXPECT_TRUE(reference_accepts(pick, d.calls[0].arguments)) << d.calls[0].arguments;
      } else {
        EXPECT_FALSE(named);
        EXPECT_EQ(d.calls[0].name, "halt");
        EXPECT_EQ(args, ojson::object());
      }
    }
  }
  expect_idle_and_intact();
}

// Every one of n = 8 samples at temperature 1 matches: a GBNF grammar on /v1/completions, a
// regex on chat (vLLM's field), choices (structured_outputs), streamed; checked by std::regex,
// not by the code under test.
TEST_F(StructuredOutputTest, GrammarRegexAndChoiceConstrainEverySample) {
  struct Case {
    const char* path;
    json constraint;
    const char* reference;  // std::regex (ECMAScript) of the same language
    bool stream;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", {{"grammar", "root ::= answer \", \" num \" \" word\nanswer ::= \"yes\" | \"no\"\n"
                                       "num ::= [0-9]{1,3}\nword ::= [a-z]{1,8}"}},
       "(yes|no), [0-9]{1,3} [a-z]{1,8}", false},
      {"/v1/chat/completions", {{"guided_regex", "\\d{3}-[A-Z]{2}( [a-z]{1,10}){0,2}"}}, "\\d{3}-[A-Z]{2}( [a-z]{1,10}){0,2}", false},
      {"/v1/chat/completions", {{"structured_outputs", {{"choice", {"red", "green", "dark blue"}}}}}, "red|green|dark blue", true},
      {"/v1/completions", {{"structured_outputs", {{"regex", "(Tom|Sue) (ran|sat)\\."}}}}, "(Tom|Sue) (ran|sat)\\.", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.constraint.dump());
    json body = {{"max_tokens", 60}, {"temperature", 1.0}, {"n", 8}, {"seed", 3}, {"stream", c.stream}};
    if (std::string(c.path) == "/v1/completions") {
      body["prompt"] = "Once upon a time";
    } else {
      body["messages"] = {{{"role", "user"}, {"content", "Tell me about Tom."}}};
    }
    body.update(c.constraint);
    auto r = post(c.path, body);
    ASSERT_EQ(r->status, 200) << r->body;
    std::vector<std::string> texts(8), finish(8);
    const auto take = [&](const json& choice) {
      const size_t i = choice["index"];
      const json& part = choice.contains("delta") ? choice["delta"] : choice.contains("message") ? choice["message"] : choice;
      const char* field = choice.contains("text") ? "text" : "content";
      if (part.contains(field) && part[field].is_string()) texts[i] += part[field].get<std::string>();
      if (choice["finish_reason"].is_string()) finish[i] = choice["finish_reason"];
    };
    if (c.stream) {
      size_t pos = 0;
      while ((pos = r->body.find("data: {", pos)) != std::string::npos) {
        const size_t end = r->body.find("\n\n", pos);
        const json chunk = json::parse(r->body.substr(pos + 6, end - pos - 6));
        for (const json& choice : chunk["choices"]) take(choice);
        pos = end;
      }
    } else {
      const json whole = json::parse(r->body);
      for (const json& choice : whole["choices"]) take(choice);
    }
    const std::regex reference(c.reference, std::regex::ECMAScript);
    std::set<std::string> distinct;
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(finish[i], "stop") << texts[i];
      EXPECT_TRUE(std::regex_match(texts[i], reference)) << "\"" << texts[i] << "\"";
      distinct.insert(texts[i]);
    }
    EXPECT_GT(distinct.size(), 1u);  // sampled, not one forced answer
  }
  expect_idle_and_intact();
}

TEST_F(StructuredOutputTest, BadGrammarsAndRegexesAreClearErrors) {
  const json chat = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 4}};
  const auto expect_400 = [&](const json& extra, const std::string& param, const std::string& words) {
    json body = chat;
    body.update(extra);
    auto r = post("/v1/chat/completions", body);
    ASSERT_EQ(r->status, 400) << extra.dump() << " " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], param) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(words), std::string::npos) << r->body;
  };
  expect_400({{"grammar", "root ::= \"a"}}, "grammar", "line 1, column 10: unterminated string");
  expect_400({{"grammar", "root ::= root \"a\""}}, "grammar", "can reach itself");
  expect_400({{"guided_grammar", "start ::= \"a\""}}, "guided_grammar", "no rule named root");
  expect_400({{"guided_regex", "(a)\\1"}}, "guided_regex", "backreferences");
  expect_400({{"structured_outputs", {{"regex", "a(?=b)"}}}}, "structured_outputs.regex", "lookaround");
  expect_400({{"grammar", 7}}, "grammar", "non-empty string");
  expect_400({{"grammar", "root ::= \"a\""}, {"guided_regex", "a"}}, "guided_regex", "one constraint");
  expect_400({{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}, "response_format", "one constraint");
  expect_400({{"structured_outputs", {{"json", {{"type", "object"}}}}}}, "structured_outputs.json", "response_format");
  expect_400({{"guided_choice", json::array()}}, "guided_choice", "1 to 1,024");
  expect_400({{"json_schema", {{"type", "object"}}}}, "json_schema", "response_format");
  expect_idle_and_intact();
}

}  // namespace
}  // namespace pagoda::testing
