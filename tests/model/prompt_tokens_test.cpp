// Prompt text and chats -> token ids, as the server and the router both compute them.
#include "model/text/prompt_tokens.h"

#include <gtest/gtest.h>

#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "test_data.h"

namespace pagoda::model {
namespace {

Tokenizer stories_tokenizer() {
  auto file = GgufFile::read(testing::stories_dir() + "/stories260K.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  auto vocab = vocab_from_gguf(*file);
  EXPECT_TRUE(vocab.is_ok());
  auto tok = Tokenizer::create(std::move(vocab).value());
  EXPECT_TRUE(tok.is_ok());
  return std::move(tok).value();
}

TEST(PromptTokens, TextGetsBosWhenTheVocabAddsIt) {
  const Tokenizer tok = stories_tokenizer();
  ASSERT_TRUE(tok.vocab().add_bos);
  const std::vector<int32_t> ids = encode_prompt(tok, "Once upon a time");
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids[0], tok.bos_id());
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), tok.encode("Once upon a time", false, true));
}

TEST(PromptTokens, ChatGetsNoSecondBosWhenTheTemplateWritesIt) {
  const Tokenizer tok = stories_tokenizer();
  const std::string bos = tok.token_to_piece(tok.bos_id(), true);
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  // llama2 renders "<s>[INST] ..." itself: exactly one BOS.
  const ChatTemplate llama2(ChatFamily::kLlama2, bos, tok.token_to_piece(tok.eos_id(), true));
  auto ids = encode_chat(tok, llama2, messages);
  ASSERT_TRUE(ids.is_ok()) << ids.status().message();
  EXPECT_EQ((*ids)[0], tok.bos_id());
  EXPECT_NE((*ids)[1], tok.bos_id());
  // chatml writes none: the vocab's BOS is added.
  const ChatTemplate chatml(ChatFamily::kChatML, bos, "");
  auto ml = encode_chat(tok, chatml, messages);
  ASSERT_TRUE(ml.is_ok());
  auto text = chatml.render(messages, true);
  ASSERT_TRUE(text.is_ok());
  std::vector<int32_t> expected = {tok.bos_id()};
  for (int32_t id : tok.encode(*text, false, true)) expected.push_back(id);
  EXPECT_EQ(*ml, expected);
  // The template's errors come through.
  EXPECT_FALSE(encode_chat(tok, llama2, {}).is_ok());
}

}  // namespace
}  // namespace pagoda::model
