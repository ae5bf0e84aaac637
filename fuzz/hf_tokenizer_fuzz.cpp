// Hugging Face tokenizer folders: input = tokenizer.json [kPartSeparator tokenizer_config.json
// [kPartSeparator generation_config.json]]. load_hf_tokenizer reads any such folder to a
// tokenizer or a Status. A tokenizer that loads must encode any text to ids inside its vocab,
// name special ids inside it, and give back valid UTF-8 text for any ids.
#include "fuzz/fuzz_util.h"
#include "model/text/hf_tokenizer.h"

using namespace pagoda::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = pagoda::fuzz::split_parts(data, size, 3);
  const std::string& dir = pagoda::fuzz::scratch_dir();
  const char* names[] = {"/tokenizer.json", "/tokenizer_config.json", "/generation_config.json"};
  for (size_t i = 0; i < 3; ++i) {
    if (i < parts.size()) {
      pagoda::fuzz::write_file(dir + names[i], parts[i]);
    } else {
      pagoda::fuzz::remove_file(dir + names[i]);
    }
  }
  auto hf = load_hf_tokenizer(dir);
  if (!hf.is_ok()) return 0;
  const Tokenizer& tok = hf->tokenizer;
  const int32_t n = tok.vocab_size();
  if (hf->bos_id >= n || hf->eos_id >= n) pagoda::fuzz::fuzz_fail("hf tokenizer: special id outside the vocab");
  for (int32_t id : hf->eos_ids) {
    if (id < 0 || id >= n) pagoda::fuzz::fuzz_fail("hf tokenizer: eos id outside the vocab");
  }
  // Encode the input itself (any bytes) and a fixed text.
  const std::string_view raw(reinterpret_cast<const char*>(data), size < 512 ? size : 512);
  for (std::string_view text : {raw, std::string_view("Hello world! 123 \xC3\xA9t\xC3\xA9 <s> \xF0\x9F\x98\x80")}) {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, hf->add_bos && hf->bos_id >= 0, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= n) pagoda::fuzz::fuzz_fail("hf tokenizer: encoded id outside the vocab");
      }
      if (!pagoda::fuzz::valid_utf8(tok.decode(ids))) pagoda::fuzz::fuzz_fail("hf tokenizer: decode is not UTF-8");
    }
  }
  std::vector<int32_t> all;
  for (int32_t id = 0; id < n && id < 4096; ++id) all.push_back(id);
  if (!pagoda::fuzz::valid_utf8(tok.decode(all))) pagoda::fuzz::fuzz_fail("hf tokenizer: decode of the vocab is not UTF-8");
  return 0;
}
