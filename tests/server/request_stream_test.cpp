// RequestStream: events of several engine requests merge into one numbering of choices; the
// stream finishes when every request has, with the first failure and summed usage.
#include "server/request_stream.h"

#include <gtest/gtest.h>

namespace pagoda::server {
namespace {

engine::TokenEvent token(int choice, const std::string& text) {
  engine::TokenEvent e;
  e.choice = choice;
  e.text = text;
  return e;
}

TEST(RequestStream, MergesPromptsAndFinishesWithTheLast) {
  auto stream = std::make_shared<RequestStream>(2, 2);  // 2 prompts x n = 2
  auto a = stream->observer(0), b = stream->observer(1);
  const std::vector<engine::TokenEvent> step = {token(0, "x"), token(1, "y"), token(0, "z")};
  a->on_tokens(step);
  b->on_tokens(step);
  b->on_choice_end({1, engine::FinishReason::kStop, "!"});
  EXPECT_TRUE(stream->wait(0));
  const std::vector<ChoiceEvent> events = stream->take();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].choice, 0);
  EXPECT_EQ(events[0].text, "xz");  // one event per choice per step
  EXPECT_EQ(events[0].tokens.size(), 2u);
  EXPECT_EQ(events[1].choice, 1);
  EXPECT_EQ(events[2].choice, 2);   // prompt 1, choice 0
  EXPECT_EQ(events[3].choice, 3);
  EXPECT_TRUE(events[4].end);
  EXPECT_EQ(events[4].choice, 3);
  EXPECT_EQ(events[4].text, "!");
  EXPECT_TRUE(stream->take().empty());

  engine::RequestUsage u;
  u.prompt_tokens = 5;
  u.completion_tokens = 3;
  u.cached_tokens = 4;
  a->on_finish(Status::ok(), u);
  EXPECT_FALSE(stream->finished());
  EXPECT_FALSE(stream->wait(0));
  b->on_finish(Status::aborted("gone"), u);
  EXPECT_TRUE(stream->finished());
  EXPECT_TRUE(stream->wait(0));
  EXPECT_EQ(stream->status().code(), StatusCode::kAborted);
  EXPECT_EQ(stream->usage().prompt_tokens, 10);
  EXPECT_EQ(stream->usage().cached_tokens, 8);
}

}  // namespace
}  // namespace pagoda::server
