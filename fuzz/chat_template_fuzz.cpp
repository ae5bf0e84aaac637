// Chat templates: byte 0 picks the family (llama2 ... gemma, deepseek), byte 1 bit 0 add_generation_prompt;
// the rest is messages separated by 0x1E, each a role byte (system/user/assistant/other) and its
// content, any bytes. render() gives text or a Status (roles out of order), never a crash; the
// rendered text of a conversation whose contents are valid UTF-8 is valid UTF-8, and encodes
// with the tok512 tokenizer. detect_chat_template reads the raw input as a Jinja string.
// Byte 1 bits 1, 2 and 4 pick the tool syntax (none, hermes, llama3, mistral, deepseek) and bit 3 think
// reasoning: the template renders with it, and ChatOutputParser reads the raw input as a reply,
// whole and in pieces cut at the 0x1E bytes: both give the same reasoning, content and calls,
// and every call's arguments are a JSON object.
#include "fuzz/fuzz_util.h"
#include "model/text/chat_output.h"
#include "model/text/chat_template.h"
#include "model/format/llama2c.h"
#include "model/text/prompt_tokens.h"
#include "model/text/tokenizer.h"

using namespace pagoda::model;

namespace {
Tokenizer* tokenizer = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("PAGODA_TEST_DATA");
  const std::string data = env != nullptr && *env != 0 ? env : PAGODA_DEFAULT_TEST_DATA;
  auto vocab = read_llama2c_vocab(data + "/models/stories260K/tok512.bin", 512);
  if (!vocab.is_ok()) pagoda::fuzz::fuzz_fail("harness: tok512.bin", vocab.status().message());
  auto tok = Tokenizer::create(std::move(*vocab));
  if (!tok.is_ok()) pagoda::fuzz::fuzz_fail("harness: tok512 tokenizer", tok.status().message());
  tokenizer = new Tokenizer(std::move(*tok));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  (void)detect_chat_template(raw);
  if (size < 2) return 0;
  const ChatFamily families[] = {ChatFamily::kLlama2, ChatFamily::kLlama3, ChatFamily::kChatML, ChatFamily::kMistral,
                                 ChatFamily::kZephyr, ChatFamily::kGemma,  ChatFamily::kDeepSeek};
  const ChatFamily family = families[data[0] % 7];
  const bool add_generation_prompt = (data[1] & 1) != 0;
  std::vector<ChatMessage> messages;
  bool utf8 = true;
  std::string_view rest = raw.substr(2);
  while (!rest.empty() || messages.empty()) {
    const size_t end = rest.find('\x1e');
    std::string_view m = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    const char* roles[] = {"system", "user", "assistant", "tool"};
    const char* role = m.empty() ? "user" : roles[static_cast<uint8_t>(m[0]) % 4];
    if (!m.empty()) m.remove_prefix(1);
    utf8 = utf8 && pagoda::fuzz::valid_utf8(m);
    messages.push_back({role, std::string(m)});
    if (messages.size() > 64) break;
  }
  const ToolSyntax syntaxes[] = {ToolSyntax::kNone, ToolSyntax::kHermes, ToolSyntax::kLlama3, ToolSyntax::kMistral,
                                 ToolSyntax::kDeepSeek};
  const ToolSyntax syntax = syntaxes[(((data[1] >> 1) & 3) | ((data[1] >> 2) & 4)) % 5];  // flag bits 1, 2 and 4
  const ReasoningSyntax reasoning = (data[1] & 8) != 0 ? ReasoningSyntax::kThink : ReasoningSyntax::kNone;
  {
    ChatOutputParser whole(syntax, reasoning, "w"), pieces(syntax, reasoning, "w");
    ChatDelta a, b;
    whole.push(raw, a);
    whole.finish(a);
    size_t at = 0;
    while (at < raw.size()) {
      const size_t cut = raw.find('\x1e', at);
      const size_t end = cut == std::string_view::npos ? raw.size() : cut + 1;
      pieces.push(raw.substr(at, end - at), b);
      at = end;
    }
    pieces.finish(b);
    if (a.reasoning != b.reasoning || a.content != b.content || a.calls.size() != b.calls.size()) {
      pagoda::fuzz::fuzz_fail("chat output: streamed pieces differ from the whole reply");
    }
    for (size_t i = 0; i < a.calls.size(); ++i) {
      if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments) {
        pagoda::fuzz::fuzz_fail("chat output: a streamed call differs");
      }
      if (!nlohmann::json::parse(a.calls[i].arguments, nullptr, false).is_object()) {
        pagoda::fuzz::fuzz_fail("chat output: call arguments are not a JSON object");
      }
    }
  }
  ChatTemplate tmpl(family, "<s>", "</s>");
  tmpl.set_syntax(syntax, reasoning);
  (void)tmpl.end_of_turn();
  auto text = tmpl.render(messages, add_generation_prompt);
  if (!text.is_ok()) return 0;
  if (utf8 && !pagoda::fuzz::valid_utf8(*text)) pagoda::fuzz::fuzz_fail("chat template: rendered text is not UTF-8");
  auto ids = encode_chat(*tokenizer, tmpl, messages);
  if (!ids.is_ok()) pagoda::fuzz::fuzz_fail("chat template: rendered but does not encode:", ids.status().message());
  for (int32_t id : *ids) {
    if (id < 0 || id >= tokenizer->vocab_size()) pagoda::fuzz::fuzz_fail("chat template: id outside the vocab");
  }
  return 0;
}
