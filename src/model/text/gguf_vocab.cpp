#include "model/text/gguf_vocab.h"

#include <unordered_map>

namespace pagoda::model {
namespace {
// Pagoda's own keys for what tokenizer.ggml.* cannot say (llama.cpp ignores them).
constexpr const char* kPreRegexesKey = "tokenizer.pagoda.pre_regexes";
constexpr const char* kIgnoreMergesKey = "tokenizer.pagoda.ignore_merges";
constexpr const char* kNormalizeNfcKey = "tokenizer.pagoda.normalize_nfc";
constexpr const char* kPrefixFirstOnlyKey = "tokenizer.pagoda.space_prefix_first_only";
constexpr const char* kPrefixUnlessSpaceKey = "tokenizer.pagoda.space_prefix_unless_space";
}  // namespace

Result<Vocab> vocab_from_gguf(const GgufFile& file) {
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model.has_value()) return Status::error("no tokenizer in this file (missing 'tokenizer.ggml.model')");
  if (*model != "llama" && *model != "gpt2") {
    return Status::invalid_argument("tokenizer model '" + *model + "' is not supported (supported: llama = SentencePiece BPE, gpt2 = byte-level BPE)");
  }
  const bool bpe = *model == "gpt2";
  const std::vector<std::string>* tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) return Status::error("missing 'tokenizer.ggml.tokens'");
  const size_t n = tokens->size();
  Vocab v;
  v.tokens = *tokens;
  if (auto scores = file.get_float_array("tokenizer.ggml.scores")) {
    if (scores->size() != n) return Status::error("'tokenizer.ggml.scores' has " + std::to_string(scores->size()) + " entries for " + std::to_string(n) + " tokens");
    v.scores = std::move(*scores);
  } else {
    v.scores.assign(n, 0.0f);
  }
  if (auto types = file.get_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != n) return Status::error("'tokenizer.ggml.token_type' has " + std::to_string(types->size()) + " entries for " + std::to_string(n) + " tokens");
    v.types.reserve(n);
    for (int64_t t : *types) {
      if (t < 0 || t > 6) return Status::error("bad token type " + std::to_string(t));
      v.types.push_back(static_cast<TokenType>(t));
    }
  } else {
    v.types.assign(n, TokenType::kNormal);
  }
  // Defaults as llama.cpp's: SPM has <unk> <s> </s> at 0 1 2 and a dummy space prefix; gpt2
  // names its special tokens or has none.
  v.bos_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.bos_token_id").value_or(bpe ? -1 : 1));
  v.eos_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.eos_token_id").value_or(bpe ? -1 : 2));
  v.unk_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.unknown_token_id").value_or(bpe ? -1 : 0));
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(!bpe);
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(!bpe);
  v.space_prefix_first_only = file.get_bool(kPrefixFirstOnlyKey).value_or(false);
  v.space_prefix_unless_space = file.get_bool(kPrefixUnlessSpaceKey).value_or(false);
  if (bpe) {
    v.model = VocabModel::kBpe;
    const std::vector<std::string>* merges = file.get_string_array("tokenizer.ggml.merges");
    if (merges == nullptr) return Status::invalid_argument("tokenizer model gpt2 needs 'tokenizer.ggml.merges'");
    v.merges = *merges;
    v.pre = file.get_string("tokenizer.ggml.pre").value_or("default");
    if (const auto* regexes = file.get_string_array(kPreRegexesKey)) {
      v.pre_regexes = *regexes;  // a custom pre-tokenizer Pagoda wrote
    } else {
      PAGODA_ASSIGN_OR_RETURN(v.pre_regexes, pre_tokenizer_regexes(v.pre));
    }
    // Hugging Face behaviour of the named tokenizers unless Pagoda wrote it down.
    v.ignore_merges = file.get_bool(kIgnoreMergesKey).value_or(v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3");
    v.normalize_nfc = file.get_bool(kNormalizeNfcKey).value_or(v.pre == "qwen2");
  }
  PAGODA_RETURN_IF_ERROR(validate_vocab(v));
  return v;
}

Vocab spm_vocab_from_merges(const Vocab& vocab) {
  CHECK(vocab.model == VocabModel::kBpe && !vocab.byte_level);
  Vocab spm = vocab;
  spm.model = VocabModel::kSpm;
  spm.merges.clear();
  spm.pre_regexes.clear();
  std::unordered_map<std::string_view, size_t> id_of;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) id_of.try_emplace(vocab.tokens[id], id);
  const float never = -static_cast<float>(vocab.merges.size() + 1);
  spm.scores.assign(vocab.tokens.size(), never);
  std::string merged;
  for (size_t rank = vocab.merges.size(); rank-- > 0;) {  // the lowest rank making a token wins
    const std::string& m = vocab.merges[rank];
    merged.clear();
    for (char c : m) {
      if (c != ' ') merged.push_back(c);  // SentencePiece-style token texts have no spaces
    }
    auto it = id_of.find(merged);
    if (it != id_of.end()) spm.scores[it->second] = -static_cast<float>(rank);
  }
  return spm;
}

void vocab_to_gguf(const Vocab& vocab, GgufFile& file) {
  if (vocab.model == VocabModel::kBpe && !vocab.byte_level) {
    vocab_to_gguf(spm_vocab_from_merges(vocab), file);
    return;
  }
  const bool bpe = vocab.model == VocabModel::kBpe;
  file.set("tokenizer.ggml.model", GgufValue::of_string(bpe ? "gpt2" : "llama"));
  if (bpe) {
    file.set("tokenizer.ggml.pre", GgufValue::of_string(vocab.pre.empty() ? "default" : vocab.pre));
    file.set("tokenizer.ggml.merges", GgufValue::string_array(vocab.merges));
    if (!vocab.pre_regexes.empty()) file.set(kPreRegexesKey, GgufValue::string_array(vocab.pre_regexes));
    file.set(kIgnoreMergesKey, GgufValue::of_bool(vocab.ignore_merges));
    file.set(kNormalizeNfcKey, GgufValue::of_bool(vocab.normalize_nfc));
  }
  file.set("tokenizer.ggml.tokens", GgufValue::string_array(vocab.tokens));
  file.set("tokenizer.ggml.scores", GgufValue::f32_array(vocab.scores));
  std::vector<int32_t> types;
  types.reserve(vocab.types.size());
  for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
  file.set("tokenizer.ggml.token_type", GgufValue::i32_array(std::move(types)));
  // An id of -1 (none) is left out.
  if (vocab.bos_id >= 0) file.set("tokenizer.ggml.bos_token_id", GgufValue::of_u32(static_cast<uint32_t>(vocab.bos_id)));
  if (vocab.eos_id >= 0) file.set("tokenizer.ggml.eos_token_id", GgufValue::of_u32(static_cast<uint32_t>(vocab.eos_id)));
  if (vocab.unk_id >= 0) file.set("tokenizer.ggml.unknown_token_id", GgufValue::of_u32(static_cast<uint32_t>(vocab.unk_id)));
  file.set("tokenizer.ggml.add_bos_token", GgufValue::of_bool(vocab.add_bos));
  file.set("tokenizer.ggml.add_eos_token", GgufValue::of_bool(vocab.add_eos));
  file.set("tokenizer.ggml.add_space_prefix", GgufValue::of_bool(vocab.add_space_prefix));
  if (vocab.space_prefix_first_only) file.set(kPrefixFirstOnlyKey, GgufValue::of_bool(true));
  if (vocab.space_prefix_unless_space) file.set(kPrefixUnlessSpaceKey, GgufValue::of_bool(true));
}

}  // namespace pagoda::model
