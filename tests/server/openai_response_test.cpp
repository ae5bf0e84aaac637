// The bodies and chunks ResponseBuilder writes.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include "server_fixture.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

TEST(OpenAiResponse, ChatBodyAndChunks) {
  auto tok = testing::stories_tokenizer();
  ResponseMeta meta;
  meta.id = "chatcmpl-1", meta.created = 7, meta.model = "m", meta.chat = true, meta.logprobs = -1, meta.include_usage = true;
  ResponseBuilder b(meta, 2, *tok);
  ChoiceEvent tokens{1, "Hi", {}, false, engine::FinishReason::kLength};
  ChoiceEvent end{1, "!", {}, true, engine::FinishReason::kStop};
  const testing::SseEvents first = testing::parse_sse(b.chunk(tokens));
  ASSERT_EQ(first.chunks.size(), 2u);  // the role, then the text
  EXPECT_EQ(first.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first.chunks[1]["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(first.chunks[1]["usage"].is_null());
  const testing::SseEvents last = testing::parse_sse(b.chunk(end));
  ASSERT_EQ(last.chunks.size(), 1u);
  EXPECT_EQ(last.chunks[0]["choices"][0]["finish_reason"], "stop");
  // A choice's first event without text: only the role chunk, no empty text chunk.
  EXPECT_EQ(testing::parse_sse(b.chunk(ChoiceEvent{0, "", {}, false, engine::FinishReason::kLength})).chunks.size(), 1u);

  ResponseBuilder whole(meta, 2, *tok);
  whole.add(tokens);
  whole.add(end);
  engine::RequestUsage usage;
  usage.prompt_tokens = 10;
  usage.completion_tokens = 3;
  usage.cached_tokens = 8;
  const json body = json::parse(whole.body(usage));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "Hi!");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_TRUE(body["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(body["usage"]["total_tokens"], 13);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  const json u = json::parse(whole.usage_chunk(usage).substr(6));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
}

}  // namespace
}  // namespace pagoda::server
