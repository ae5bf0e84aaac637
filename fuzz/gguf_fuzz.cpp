// GGUF reader: any bytes -> GgufFile::parse gives a file or a Status, never a crash, an
// out-of-bounds read or an allocation far beyond the input. A file that parses is then read
// the way model loading reads it (model config, KV spec, vocab -> tokenizer) and re-serialized:
// its bytes must parse again to the same metadata and tensors.
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "model/kv_spec.h"
#include "model/model_config.h"
#include "model/text/tokenizer.h"

using namespace pagoda::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::parse(data, size, "fuzz.gguf");
  if (!file.is_ok()) {
    if (file.status().message().empty()) pagoda::fuzz::fuzz_fail("gguf: error without a message");
    return 0;
  }
  for (const auto& [key, value] : file->metadata()) (void)value.to_display_string();
  uint64_t sum = 0;
  for (const GgufTensorInfo& t : file->tensors()) {
    const uint8_t* p = file->tensor_data(t);
    if (p == nullptr) pagoda::fuzz::fuzz_fail("gguf: parsed tensor without data", t.name);
    if (t.bytes > 0) sum += p[0] + p[t.bytes - 1];  // the whole range is readable (ASan checks)
  }
  (void)sum;
  (void)config_from_gguf(*file);
  (void)kv_spec_from_gguf(*file);
  auto vocab = vocab_from_gguf(*file);
  if (vocab.is_ok()) {
    auto tok = Tokenizer::create(std::move(*vocab));
    if (tok.is_ok()) {
      const std::vector<int32_t> ids = tok->encode("Hello world <s> 123", false, true);
      for (int32_t id : ids) {
        if (id < 0 || id >= tok->vocab_size()) pagoda::fuzz::fuzz_fail("gguf: token id out of range");
      }
      (void)tok->decode(ids);
    }
  }
  const std::vector<uint8_t> bytes = file->to_bytes();
  auto again = GgufFile::parse(bytes.data(), bytes.size(), "fuzz-rewritten.gguf");
  if (!again.is_ok()) pagoda::fuzz::fuzz_fail("gguf: rewritten file does not parse:", again.status().message());
  if (again->metadata() != file->metadata()) pagoda::fuzz::fuzz_fail("gguf: metadata changed by a rewrite");
  if (again->tensors().size() != file->tensors().size()) pagoda::fuzz::fuzz_fail("gguf: tensors changed by a rewrite");
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    const GgufTensorInfo &a = file->tensors()[i], &b = again->tensors()[i];
    if (a.name != b.name || a.dims != b.dims || a.ggml_type != b.ggml_type || a.bytes != b.bytes ||
        std::memcmp(file->tensor_data(a), again->tensor_data(b), a.bytes) != 0) {
      pagoda::fuzz::fuzz_fail("gguf: tensor changed by a rewrite", a.name);
    }
  }
  return 0;
}
