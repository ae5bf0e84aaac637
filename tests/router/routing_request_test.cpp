// The router reads a request's prompt as the server does and hashes its blocks as the block
// manager does: the hashes equal the ones a BlockManager registers (and publishes) for the
// same tokens and namespace.
#include "router/routing_request.h"

#include <gtest/gtest.h>

#include "kvcache/block_manager.h"
#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "model/text/prompt_tokens.h"
#include "test_data.h"

namespace pagoda::router {
namespace {

class RoutingRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto file = model::GgufFile::read(testing::stories_dir() + "/stories260K.gguf");
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    auto vocab = model::vocab_from_gguf(*file);
    ASSERT_TRUE(vocab.is_ok());
    auto tok = model::Tokenizer::create(std::move(vocab).value());
    ASSERT_TRUE(tok.is_ok());
    tokenizer_ = new model::Tokenizer(std::move(tok).value());
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  RoutingRequest read(const std::string& body, bool chat, const std::string& key = "") {
    return read_routing_request(body, chat, *tokenizer_, chatml_, key);
  }
  static model::Tokenizer* tokenizer_;
  model::ChatTemplate chatml_{model::ChatFamily::kChatML, "<s>", "</s>"};
};
model::Tokenizer* RoutingRequestTest::tokenizer_ = nullptr;

// Tools are part of the prompt (in the client's key order), as the worker renders them.
TEST_F(RoutingRequestTest, ChatsWithToolsRenderTheTools) {
  model::ChatTemplate hermes(model::ChatFamily::kChatML, "<s>", "</s>");
  hermes.set_syntax(model::ToolSyntax::kHermes, model::ReasoningSyntax::kNone);
  const std::string tools = R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  const RoutingRequest r = read_routing_request(R"({"messages":[{"role":"user","content":"Hi"}],"tools":)" + tools + "}", true,
                                                *tokenizer_, hermes, "");
  ASSERT_TRUE(r.parsed);
  auto offered = model::chat_tools_from_json(nlohmann::ordered_json::parse(tools));
  ASSERT_TRUE(offered.is_ok());
  model::ChatRenderOptions options;
  options.tools = &*offered;
  auto expected = model::encode_chat(*tokenizer_, hermes, {{"user", "Hi", {}, {}}}, options);
  ASSERT_TRUE(expected.is_ok());
  EXPECT_EQ(r.tokens, *expected);
  auto without = model::encode_chat(*tokenizer_, hermes, {{"user", "Hi", {}, {}}});
  EXPECT_NE(r.tokens, *without);
}

TEST_F(RoutingRequestTest, CompletionPromptsAsTheServerTokenizesThem) {
  const RoutingRequest r = read(R"({"prompt":"Once upon a time","max_tokens":7,"stream":true,"n":2})", false);
  ASSERT_TRUE(r.parsed);
  EXPECT_EQ(r.tokens, model::encode_prompt(*tokenizer_, "Once upon a time"));
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.num_choices, 2);
  const RoutingRequest ids = read(R"({"prompt":[1,5,9]})", false);
  EXPECT_EQ(ids.tokens, (std::vector<int32_t>{1, 5, 9}));
  const RoutingRequest many = read(R"({"prompt":["Hi there","Bye"]})", false);
  EXPECT_EQ(many.tokens, model::encode_prompt(*tokenizer_, "Hi there"));
  EXPECT_EQ(many.num_prompts, 2);
  EXPECT_EQ(read(R"({"prompt":[[4,5],[6]]})", false).tokens, (std::vector<int32_t>{4, 5}));
}

TEST_F(RoutingRequestTest, ChatsThroughTheSameTemplateAndMessageRules) {
  const RoutingRequest r = read(
      R"({"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"!"}]}]})",
      true);
  ASSERT_TRUE(r.parsed);
  auto expected = model::encode_chat(*tokenizer_, chatml_, {{"system", "Be brief."}, {"user", "Hi!"}});
  ASSERT_TRUE(expected.is_ok());
  EXPECT_EQ(r.tokens, *expected);
}

TEST_F(RoutingRequestTest, SaltsAndKeys) {
  const RoutingRequest r = read(R"({"prompt":"x","cache_salt":"s1"})", false, "sk-a");
  EXPECT_EQ(r.tenant_salt(false), "s1");
  EXPECT_NE(r.tenant_salt(true), "s1");
  EXPECT_NE(r.tenant_salt(true), read(R"({"prompt":"x","cache_salt":"s1"})", false, "sk-b").tenant_salt(true));
}

TEST_F(RoutingRequestTest, WhatItCannotReadIsPlacedByLoad) {
  for (const char* body : {"", "{", "[]", R"({"prompt":5})", R"({"prompt":[]})", R"({"prompt":[1,-2]})",
                           R"({"prompt":[999999]})", R"({"messages":"hi"})", R"({"messages":[{"role":"robot","content":"x"}]})"}) {
    const bool chat = std::string(body).find("messages") != std::string::npos;
    EXPECT_FALSE(read(body, chat).parsed) << body;
    EXPECT_TRUE(read(body, chat).tokens.empty()) << body;
  }
}

// The hashes the router computes are the ones the block manager registers for the same prompt.
TEST_F(RoutingRequestTest, BlockHashesAreTheBlockManagersOwn) {
  kvcache::KvLayout layout;
  layout.n_layer = 1;
  layout.n_kv_head = 1;
  layout.head_dim = 4;
  layout.block_size = 4;
  auto pool = kvcache::BlockPool::create(layout, 16);
  ASSERT_TRUE(pool.is_ok());
  kvcache::BlockManager manager(*pool);
  struct Capture : kvcache::BlockEventListener {
    std::vector<kvcache::BlockHash> stored;
    void on_blocks_stored(std::span<const kvcache::BlockInfo> chain) override {
      for (const auto& b : chain) stored.push_back(b.hash);
    }
    void on_block_evicted(const kvcache::BlockInfo&) override {}
  } capture;
  manager.add_listener(&capture);
  kvcache::KvNamespace ns;
  ns.model_fingerprint = 0x1234;
  ns.kv_format = 0x99;
  ns.cache_salt = kvcache::cache_salt_key("tenant-a");
  const std::vector<int32_t> prompt = model::encode_prompt(*tokenizer_, "Once upon a time there was a big dog named Max.");
  ASSERT_GE(prompt.size(), 9u);
  const kvcache::SeqId seq = manager.add_sequence(static_cast<int64_t>(prompt.size()), {ns, 0, true});
  std::vector<int64_t> slots(prompt.size());
  std::vector<kvcache::BlockCopy> copies;
  ASSERT_TRUE(manager.append(seq, prompt, slots, copies));
  manager.commit(seq);
  const std::vector<kvcache::BlockHash> mine = prompt_block_hashes(prompt, 4, ns);
  ASSERT_EQ(mine.size(), (prompt.size() - 1) / 4);
  ASSERT_GE(capture.stored.size(), mine.size());
  EXPECT_EQ(std::vector<kvcache::BlockHash>(capture.stored.begin(), capture.stored.begin() + mine.size()), mine);
  // Another salt, another chain.
  kvcache::KvNamespace other = ns;
  other.cache_salt = kvcache::cache_salt_key("tenant-b");
  EXPECT_NE(prompt_block_hashes(prompt, 4, other)[0], mine[0]);
  EXPECT_TRUE(prompt_block_hashes(std::vector<int32_t>{1, 2, 3, 4}, 4, ns).empty());  // the last token is computed
  manager.remove_listener(&capture);
  manager.free_sequence(seq);
}

}  // namespace
}  // namespace pagoda::router
