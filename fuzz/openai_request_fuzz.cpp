// The OpenAI request parser: any body -> parse_completion_request and parse_chat_request give a
// validated ApiRequest or a Status naming the field, never a crash or an exception. An accepted
// request stays inside its RequestLimits (choices, stops, logprobs, token ids below the vocab
// size, max_tokens within the context) and holds what its endpoint needs.
#include "fuzz/fuzz_util.h"
#include "server/openai_request.h"

using namespace pagoda::server;

namespace {

void check(const ApiRequest& req, const RequestLimits& limits, bool chat) {
  using pagoda::fuzz::fuzz_fail;
  if (req.chat != chat) fuzz_fail("openai: request kind");
  if (req.n < 1) fuzz_fail("openai: n < 1");
  const size_t prompts = chat ? 1 : req.prompts.size();
  if (!chat && req.prompts.empty()) fuzz_fail("openai: completion without a prompt");
  if (chat && req.messages.empty()) fuzz_fail("openai: chat without messages");
  if (static_cast<int64_t>(prompts) * req.n > limits.max_choices) fuzz_fail("openai: too many choices");
  if (req.stop.size() > limits.max_stop || req.stop_token_ids.size() > limits.max_stop) fuzz_fail("openai: too many stops");
  if (req.logprobs > limits.max_logprobs || req.logprobs < -1) fuzz_fail("openai: logprobs out of range");
  if (req.max_tokens < 0 || (req.max_tokens_given && req.max_tokens > limits.max_context)) fuzz_fail("openai: max_tokens out of range");
  for (int32_t id : req.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) fuzz_fail("openai: stop token id outside the vocab");
  }
  for (const PromptInput& p : req.prompts) {
    for (int32_t id : p.tokens) {
      if (id < 0 || id >= limits.vocab_size) fuzz_fail("openai: prompt token id outside the vocab");
    }
    if (!p.is_tokens && !pagoda::fuzz::valid_utf8(p.text)) fuzz_fail("openai: prompt text is not UTF-8");
  }
  for (const auto& m : req.messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") fuzz_fail("openai: role", m.role);
    if (m.role != "assistant" && !m.tool_calls.empty()) fuzz_fail("openai: tool calls outside an assistant message");
    if (!pagoda::fuzz::valid_utf8(m.content)) fuzz_fail("openai: message content is not UTF-8");
  }
  if (!req.sampling.validate().is_ok()) fuzz_fail("openai: sampling parameters accepted but invalid");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestLimits limits;
  limits.vocab_size = 512;
  limits.max_context = 1024;
  for (bool chat : {false, true}) {
    std::string param;
    auto req = chat ? parse_chat_request(body, limits, &param) : parse_completion_request(body, limits, &param);
    if (req.is_ok()) {
      check(*req, limits, chat);
    } else if (req.status().message().empty()) {
      pagoda::fuzz::fuzz_fail("openai: error without a message");
    }
  }
  return 0;
}
