#include "model/gguf_vocab.h"

namespace pagoda::model {

Result<Vocab> vocab_from_gguf(const GgufFile& file) {
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model.has_value()) return Status::error("no tokenizer in this file (missing 'tokenizer.ggml.model')");
  if (*model != "llama") {
    return Status::error("tokenizer model '" + *model + "' is not supported yet (supported: llama / SentencePiece BPE)");
  }
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
  v.bos_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.bos_token_id").value_or(1));
  v.eos_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.eos_token_id").value_or(2));
  v.unk_id = static_cast<int32_t>(file.get_int("tokenizer.ggml.unknown_token_id").value_or(0));
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  PAGODA_RETURN_IF_ERROR(validate_vocab(v));
  return v;
}

void vocab_to_gguf(const Vocab& vocab, GgufFile& file) {
  file.set("tokenizer.ggml.model", GgufValue::of_string("llama"));
  file.set("tokenizer.ggml.tokens", GgufValue::string_array(vocab.tokens));
  file.set("tokenizer.ggml.scores", GgufValue::f32_array(vocab.scores));
  std::vector<int32_t> types;
  types.reserve(vocab.types.size());
  for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
  file.set("tokenizer.ggml.token_type", GgufValue::i32_array(std::move(types)));
  file.set("tokenizer.ggml.bos_token_id", GgufValue::of_u32(static_cast<uint32_t>(vocab.bos_id)));
  file.set("tokenizer.ggml.eos_token_id", GgufValue::of_u32(static_cast<uint32_t>(vocab.eos_id)));
  file.set("tokenizer.ggml.unknown_token_id", GgufValue::of_u32(static_cast<uint32_t>(vocab.unk_id)));
  file.set("tokenizer.ggml.add_bos_token", GgufValue::of_bool(vocab.add_bos));
  file.set("tokenizer.ggml.add_eos_token", GgufValue::of_bool(vocab.add_eos));
  file.set("tokenizer.ggml.add_space_prefix", GgufValue::of_bool(vocab.add_space_prefix));
}

}  // namespace pagoda::model
