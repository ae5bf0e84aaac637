// llama2.c checkpoints: input = model bytes [kPartSeparator tokenizer.bin bytes]. The header
// reader, the tokenizer.bin reader and the whole import get any bytes; each returns a result or a
// Status, never a crash or a read past the file. An import that succeeds yields a GgufFile whose
// vocab builds a tokenizer and whose bytes parse back.
#include "fuzz/fuzz_util.h"
#include "model/format/gguf.h"
#include "model/text/gguf_vocab.h"
#include "model/format/llama2c.h"
#include "model/model_config.h"

using namespace pagoda::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = pagoda::fuzz::split_parts(data, size, 2);
  const std::string model = pagoda::fuzz::scratch_dir() + "/model.bin";
  const std::string tokenizer = pagoda::fuzz::scratch_dir() + "/tokenizer.bin";
  pagoda::fuzz::write_file(model, parts[0]);
  pagoda::fuzz::write_file(tokenizer, parts.size() > 1 ? parts[1] : std::string_view{});
  auto header = read_llama2c_header(model);
  for (int32_t vocab_size : {header.is_ok() ? header->vocab_size : 0, 32, 512}) {
    if (vocab_size <= 0) continue;
    auto vocab = read_llama2c_vocab(tokenizer, vocab_size);
    if (vocab.is_ok() && static_cast<int32_t>(vocab->tokens.size()) != vocab_size) {
      pagoda::fuzz::fuzz_fail("llama2c: vocab of another size");
    }
  }
  auto gguf = import_llama2c(model, tokenizer);
  if (gguf.is_ok()) {
    if (!header.is_ok()) pagoda::fuzz::fuzz_fail("llama2c: import accepted a header the reader rejects");
    if (!config_from_gguf(*gguf).is_ok()) pagoda::fuzz::fuzz_fail("llama2c: imported model has no valid config");
    const std::vector<uint8_t> bytes = gguf->to_bytes();
    if (!GgufFile::parse(bytes.data(), bytes.size(), "imported.gguf").is_ok()) {
      pagoda::fuzz::fuzz_fail("llama2c: imported GGUF does not parse");
    }
  }
  return 0;
}
