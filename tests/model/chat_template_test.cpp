// Chat templates render what the reference Hugging Face templates render. The expected strings
// were produced by chat_template_reference.py (Jinja, as transformers' apply_chat_template).
#include "model/text/chat_template.h"

#include <gtest/gtest.h>

namespace pagoda::model {
namespace {

struct Case {
  const char* family;
  const char* conversation;
  bool add_generation_prompt;
  const char* want;
};

// python3 tests/model/chat_template_reference.py
const Case kCases[] = {
    {"llama2", "full", true, "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello! [/INST] Hi there. </s><s>[INST] What is 2+2? [/INST]"},
    {"llama2", "full", false, "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello! [/INST] Hi there. </s><s>[INST] What is 2+2? [/INST]"},
    {"llama2", "single", true, "<s>[INST] Tell me a story. [/INST]"},
    {"llama2", "single", false, "<s>[INST] Tell me a story. [/INST]"},
    {"llama2", "answered", true, "<s>[INST] Hi [/INST] Hello </s>"},
    {"llama2", "answered", false, "<s>[INST] Hi [/INST] Hello </s>"},
    {"llama3", "full", true, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", "full", false, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"},
    {"llama3", "single", true, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nTell me a story.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", "single", false, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nTell me a story.<|eot_id|>"},
    {"llama3", "answered", true, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", "answered", false, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"},
    {"chatml", "full", true, "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n Hi there. <|im_end|>\n<|im_start|>user\n  What is 2+2?\n<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", "full", false, "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n Hi there. <|im_end|>\n<|im_start|>user\n  What is 2+2?\n<|im_end|>\n"},
    {"chatml", "single", true, "<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", "single", false, "<|im_start|>user\nTell me a story.<|im_end|>\n"},
    {"chatml", "answered", true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", "answered", false, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"},
    {"mistral", "full", true, "<s> [INST] You are terse.\n\nHello! [/INST]  Hi there. </s> [INST]   What is 2+2?\n [/INST]"},
    {"mistral", "full", false, "<s> [INST] You are terse.\n\nHello! [/INST]  Hi there. </s> [INST]   What is 2+2?\n [/INST]"},
    {"mistral", "single", true, "<s> [INST] Tell me a story. [/INST]"},
    {"mistral", "single", false, "<s> [INST] Tell me a story. [/INST]"},
    {"mistral", "answered", true, "<s> [INST] Hi [/INST] Hello</s>"},
    {"mistral", "answered", false, "<s> [INST] Hi [/INST] Hello</s>"},
    {"zephyr", "full", true, "<|system|>\nYou are terse.</s>\n<|user|>\nHello!</s>\n<|assistant|>\n Hi there. </s>\n<|user|>\n  What is 2+2?\n</s>\n<|assistant|>\n"},
    {"zephyr", "full", false, "<|system|>\nYou are terse.</s>\n<|user|>\nHello!</s>\n<|assistant|>\n Hi there. </s>\n<|user|>\n  What is 2+2?\n</s>\n"},
    {"zephyr", "single", true, "<|user|>\nTell me a story.</s>\n<|assistant|>\n"},
    {"zephyr", "single", false, "<|user|>\nTell me a story.</s>\n"},
    {"zephyr", "answered", true, "<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n<|assistant|>\n"},
    {"zephyr", "answered", false, "<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n"},
    {"gemma", "full", true, "<bos><start_of_turn>user\nYou are terse.\n\nHello!<end_of_turn>\n<start_of_turn>model\nHi there.<end_of_turn>\n<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma", "full", false, "<bos><start_of_turn>user\nYou are terse.\n\nHello!<end_of_turn>\n<start_of_turn>model\nHi there.<end_of_turn>\n<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"},
    {"gemma", "single", true, "<bos><start_of_turn>user\nTell me a story.<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma", "single", false, "<bos><start_of_turn>user\nTell me a story.<end_of_turn>\n"},
    {"gemma", "answered", true, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma", "answered", false, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"},
};

std::vector<ChatMessage> conversation(const std::string& name) {
  if (name == "full") {
    return {{"system", "You are terse."}, {"user", "Hello!"}, {"assistant", " Hi there. "}, {"user", "  What is 2+2?\n"}};
  }
  if (name == "single") return {{"user", "Tell me a story."}};
  return {{"user", "Hi"}, {"assistant", "Hello"}};
}

ChatTemplate make(ChatFamily family) {
  switch (family) {
    case ChatFamily::kLlama3: return ChatTemplate(family, "<|begin_of_text|>", "<|eot_id|>");
    case ChatFamily::kChatML: return ChatTemplate(family, "", "");
    case ChatFamily::kGemma: return ChatTemplate(family, "<bos>", "<eos>");
    default: return ChatTemplate(family, "<s>", "</s>");
  }
}

TEST(ChatTemplate, RendersLikeTheReferenceTemplates) {
  for (const Case& c : kCases) {
    const auto family = chat_family_from_name(c.family);
    ASSERT_TRUE(family.has_value()) << c.family;
    auto text = make(*family).render(conversation(c.conversation), c.add_generation_prompt);
    ASSERT_TRUE(text.is_ok()) << c.family << " " << c.conversation << ": " << text.status().message();
    EXPECT_EQ(*text, c.want) << c.family << " " << c.conversation << " gen=" << c.add_generation_prompt;
  }
}

// Out-of-order roles (which the reference templates raise on or silently drop) and a conversation
// without a user message are errors, never a silently odd prompt.
TEST(ChatTemplate, AlternatingFamiliesRejectBadRoleOrder) {
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  const std::vector<ChatMessage> starts_with_assistant = {{"assistant", "a"}};
  const std::vector<ChatMessage> only_system = {{"system", "s"}};
  const std::vector<ChatMessage> late_system = {{"user", "a"}, {"system", "b"}};
  for (ChatFamily f : {ChatFamily::kLlama2, ChatFamily::kMistral, ChatFamily::kGemma}) {
    for (const auto* messages : {&two_users, &starts_with_assistant, &only_system, &late_system}) {
      auto r = make(f).render(*messages);
      ASSERT_FALSE(r.is_ok()) << chat_family_name(f);
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  // The free-form families accept any order, as their templates do.
  EXPECT_TRUE(make(ChatFamily::kChatML).render(two_users).is_ok());
  EXPECT_FALSE(make(ChatFamily::kChatML).render({}).is_ok());
}

TEST(ChatTemplate, DetectsFamiliesFromJinjaSource) {
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}..."), ChatFamily::kChatML);
  EXPECT_EQ(detect_chat_template("<|start_header_id|>' + message['role'] + '<|end_header_id|>"), ChatFamily::kLlama3);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' }} <<SYS>>\\n"), ChatFamily::kLlama2);
  EXPECT_EQ(detect_chat_template("{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFamily::kMistral);
  EXPECT_EQ(detect_chat_template("{{ '<|user|>\\n' }}{{ '<|assistant|>' }}"), ChatFamily::kZephyr);
  EXPECT_EQ(detect_chat_template("<start_of_turn>' + role"), ChatFamily::kGemma);
  EXPECT_EQ(detect_chat_template("{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜><think>'}}"), ChatFamily::kDeepSeek);
  EXPECT_EQ(detect_chat_template(""), std::nullopt);
  EXPECT_EQ(detect_chat_template("{{ messages[0].content }}"), std::nullopt);
}

TEST(ChatTemplate, NamesRoundTripAndEndOfTurn) {
  for (ChatFamily f : {ChatFamily::kLlama2, ChatFamily::kLlama3, ChatFamily::kChatML, ChatFamily::kMistral,
                       ChatFamily::kZephyr, ChatFamily::kGemma, ChatFamily::kDeepSeek}) {
    EXPECT_EQ(chat_family_from_name(chat_family_name(f)), f);
  }
  EXPECT_EQ(chat_family_from_name("vicuna"), std::nullopt);
  EXPECT_EQ(chat_family_names(), "llama2, llama3, chatml, mistral, zephyr, gemma, deepseek");
  EXPECT_EQ(make(ChatFamily::kLlama3).end_of_turn(), "<|eot_id|>");
  EXPECT_EQ(make(ChatFamily::kChatML).end_of_turn(), "<|im_end|>");
  EXPECT_EQ(make(ChatFamily::kGemma).end_of_turn(), "<end_of_turn>");
  EXPECT_EQ(make(ChatFamily::kLlama2).end_of_turn(), "</s>");
  EXPECT_EQ(make(ChatFamily::kDeepSeek).end_of_turn(), "</s>");  // its EOS, <｜end▁of▁sentence｜> in DeepSeek's vocabulary
}

}  // namespace
}  // namespace pagoda::model
