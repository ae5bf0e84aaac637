// The HTTP layer over a scripted engine: OpenAI shapes, streaming, parameters reaching the
// engine, and the error statuses.
#include "server/http_server.h"

#include "server_fixture.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

const std::vector<int32_t> kOnceUponATime = {1, 403, 407, 261, 378};  // BOS + "Once upon a time"

// Choice c's tokens as the fake generates them: the prompt, rotated by c, repeated.
std::vector<int32_t> script(const std::vector<int32_t>& prompt, int choice, int n) {
  std::vector<int32_t> out;
  for (int k = 0; k < n; ++k) out.push_back(prompt[static_cast<size_t>(k + choice) % prompt.size()]);
  return out;
}

TEST_F(ServerTest, HealthModelsAndMetrics) {
  start();
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "stories260K");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(client_->Get("/v1/models/stories260K")->status, 200);
  EXPECT_EQ(client_->Get("/v1/models/gpt-4")->status, 404);
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("pagoda_requests_running 0"), std::string::npos) << metrics->body;
  EXPECT_EQ(metrics->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
}

TEST_F(ServerTest, CompletionFollowsTheEngine) {
  start();
  auto r = post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 7}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], decode(script(kOnceUponATime, 0, 7)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 5}, {"completion_tokens", 7}, {"total_tokens", 12},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  const auto submitted = engine_->submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].prompt, kOnceUponATime);  // BOS added, as the vocab asks
  // Same prompt again: the (modelled) prefix cache answers all but the last token.
  auto again = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 7}});
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(json::parse(again->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST_F(ServerTest, ParametersReachTheEngine) {
  start();
  const json body = {{"prompt", "Tom"}, {"max_tokens", 3}, {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 5},
                     {"min_p", 0.1}, {"seed", 7}, {"stop", "x"}, {"stop_token_ids", {13}}, {"priority", 3},
                     {"cache_salt", "tenant-a"}, {"ignore_eos", true}, {"n", 2}, {"some_future_field", {1, 2}},
                     {"presence_penalty", 0.5}, {"frequency_penalty", -0.25}, {"logit_bias", {{"13", -100}, {"2", 5}}}};
  auto r = post("/v1/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  const engine::CompletionRequest got = engine_->submitted().at(0);
  EXPECT_FLOAT_EQ(got.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(got.sampling.top_p, 0.9f);
  EXPECT_EQ(got.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(got.sampling.min_p, 0.1f);
  EXPECT_EQ(got.sampling.seed, 7u);
  EXPECT_EQ(got.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(got.stop_token_ids, std::vector<int32_t>{13});
  EXPECT_EQ(got.priority, 3);
  EXPECT_EQ(got.cache_salt, "tenant-a");
  EXPECT_TRUE(got.ignore_eos);
  EXPECT_EQ(got.n, 2);
  EXPECT_EQ(got.max_tokens, 3);
  EXPECT_FLOAT_EQ(got.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(got.sampling.frequency_penalty, -0.25f);
  const std::vector<std::pair<int32_t, float>> bias = {{2, 5.0f}, {13, -100.0f}};
  EXPECT_EQ(got.sampling.logit_bias, bias);
  EXPECT_EQ(json::parse(r->body)["choices"].size(), 2u);
}

TEST_F(ServerTest, ChoicesPerPromptAndTokenPrompts) {
  start();
  auto r = post("/v1/completions", {{"prompt", {"Once upon a time", "Tom"}}, {"n", 2}, {"max_tokens", 4}});
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["choices"][1]["text"], decode(script(kOnceUponATime, 1, 4)));
  const auto submitted = engine_->submitted();
  ASSERT_EQ(submitted.size(), 2u);
  EXPECT_EQ(j["choices"][2]["text"], decode(script(submitted[1].prompt, 0, 4)));
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int64_t>(submitted[0].prompt.size() + submitted[1].prompt.size()));

  auto ids = post("/v1/completions", {{"prompt", {403, 407}}, {"max_tokens", 2}});
  ASSERT_EQ(ids->status, 200) << ids->body;
  EXPECT_EQ(engine_->submitted().back().prompt, (std::vector<int32_t>{403, 407}));  // as given, no BOS
}

TEST_F(ServerTest, StopTokenEndsAChoiceWithStop) {
  server::ServerConfig config;
  config.end_of_text_ids = {261};  // as `pagoda serve` passes EOS/BOS
  start(config);
  auto r = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 10}});
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["text"], decode({1, 403, 407}));
  auto ignored = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"ignore_eos", true}});
  EXPECT_EQ(json::parse(ignored->body)["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, ChatRendersTheTemplateAndStopsAtItsEndOfTurn) {
  start();  // chatml: <|im_end|> is no token of this vocab, so it becomes a stop string
  auto r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}});
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const engine::CompletionRequest got = engine_->submitted().at(0);
  EXPECT_EQ(got.prompt, tokenizer_->encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", true, true));
  EXPECT_EQ(j["choices"][0]["message"]["content"], decode(script(got.prompt, 0, 3)));
  EXPECT_EQ(got.stop, std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(got.max_tokens, 3);
  auto unbounded = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_EQ(unbounded->status, 200) << unbounded->body;
  EXPECT_EQ(engine_->submitted().at(1).max_tokens, kContext);  // no max_tokens: until the context is full
}

TEST_F(ServerTest, ChatTemplateWithBosTextGetsOneBos) {
  start({}, 8, server::ChatFamily::kLlama2);  // renders "<s>[INST] ..."; "<s>" is this vocab's BOS
  auto r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}});
  ASSERT_EQ(r->status, 200) << r->body;
  const engine::CompletionRequest got = engine_->submitted().at(0);
  ASSERT_GE(got.prompt.size(), 2u);
  EXPECT_EQ(got.prompt[0], 1);
  EXPECT_NE(got.prompt[1], 1);
  EXPECT_EQ(got.stop_token_ids, std::vector<int32_t>{2});  // "</s>" is a token: EOS ends a turn
}

TEST_F(ServerTest, StreamingCompletionWithUsage) {
  start();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  auto r = post("/v1/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const SseEvents events = parse_sse(r->body);
  ASSERT_TRUE(events.done);
  ASSERT_GE(events.chunks.size(), 2u);
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 1 < events.chunks.size(); ++i) {
    const json& c = events.chunks[i];
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, decode(script(kOnceUponATime, 0, 6)));
  EXPECT_EQ(finish, "length");
  const json& last = events.chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 6);
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ServerTest, StreamingChatNamesTheRoleFirst) {
  start();
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}, {"stream", true}, {"n", 2}};
  auto r = post("/v1/chat/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  const SseEvents events = parse_sse(r->body);
  ASSERT_TRUE(events.done);
  std::vector<std::string> text(2);
  std::vector<bool> role_first(2, false), seen(2, false), finished(2, false);
  for (const json& c : events.chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_FALSE(c.contains("usage"));  // no include_usage
    const int i = c["choices"][0]["index"];
    const json& delta = c["choices"][0]["delta"];
    if (!seen[i]) role_first[i] = delta.value("role", "") == "assistant";
    seen[i] = true;
    if (delta.contains("content")) text[i] += delta["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finished[i] = true;
  }
  const auto prompt = engine_->submitted().at(0).prompt;
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(role_first[i]);
    EXPECT_TRUE(finished[i]);
    EXPECT_EQ(text[i], decode(script(prompt, i, 4)));
  }
}

TEST_F(ServerTest, LogprobsInBothShapes) {
  start();
  auto r = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 3}, {"logprobs", 2}});
  ASSERT_EQ(r->status, 200) << r->body;
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["tokens"][1], tokenizer_->token_to_piece(403));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][0].get<float>(), -0.5f);
  EXPECT_EQ(lp["top_logprobs"][1].size(), 2u);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][1][tokenizer_->token_to_piece(404)].get<float>(), -1.0f);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(engine_->submitted().back().logprobs, 2);

  auto chat = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2},
                                            {"logprobs", true}, {"top_logprobs", 1}});
  ASSERT_EQ(chat->status, 200) << chat->body;
  const json content = json::parse(chat->body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 1u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
  EXPECT_EQ(engine_->submitted().back().logprobs, 1);
}

}  // namespace
}  // namespace pagoda::testing
