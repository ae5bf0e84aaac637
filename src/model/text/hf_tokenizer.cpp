#include "model/text/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/text/pre_tokenizer.h"

namespace pagoda::model {
namespace {

using nlohmann::json;

Result<json> read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument(path.string() + ": not valid JSON");
  return j;
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

// The pre_tokenizer and normalizer as Vocab fields; anything else is an error naming it.
Status read_normalizer(const json& normalizer, Vocab& v) {
  if (normalizer.is_null()) return Status::ok();
  const std::string type = type_of(normalizer);
  if (type == "NFC") {
    v.normalize_nfc = true;
    return Status::ok();
  }
  if (type == "Sequence" && normalizer.value("normalizers", json::array()).empty()) return Status::ok();
  // SentencePiece-style text: Prepend("▁") + Replace(" ", "▁"), or the Replace alone (in a
  // Sequence, or bare as Gemma's tokenizer.json has it).
  if (type == "Replace" && normalizer.value("content", "") == "\u2581" && normalizer.contains("pattern") &&
      normalizer["pattern"].value("String", "") == " ") {
    v.byte_level = false;
    v.add_space_prefix = false;
    return Status::ok();
  }
  if (type == "Sequence") {
    const json& steps = normalizer["normalizers"];
    size_t i = 0;
    bool prepend = false;
    if (type_of(steps[0]) == "Prepend" && steps[0].value("prepend", "") == "\u2581") prepend = true, ++i;
    if (i + 1 == steps.size() && type_of(steps[i]) == "Replace" &&
        steps[i].value("content", "") == "\u2581" && steps[i].contains("pattern") &&
        steps[i]["pattern"].value("String", "") == " ") {
      v.byte_level = false;
      v.add_space_prefix = prepend;
      return Status::ok();
    }
  }
  return Status::invalid_argument("tokenizer.json: normalizer " + normalizer.dump().substr(0, 200) +
                                  " is not supported (supported: none, NFC, Prepend(\u2581)+Replace(' ', \u2581), Replace(' ', \u2581))");
}

// spaces_replaced: the normalizer has already turned every space into ▁.
Status read_pre_step(const json& step, Vocab& v, bool& byte_level_step, bool spaces_replaced) {
  const std::string type = type_of(step);
  // Splitting on a space after every space became ▁ splits nothing (Gemma: Split(" ",
  // MergedWithPrevious) after Replace(" ", ▁)).
  if (type == "Split" && spaces_replaced && !step.value("invert", false) && step.contains("pattern") &&
      step["pattern"].is_object() && step["pattern"].value("String", "") == " ") {
    return Status::ok();
  }
  if (type == "ByteLevel") {
    byte_level_step = true;
    if (step.value("add_prefix_space", false)) {
      return Status::invalid_argument("tokenizer.json: ByteLevel pre-tokenizer with add_prefix_space is not supported");
    }
    if (step.value("use_regex", true)) v.pre_regexes.emplace_back(kGpt2Regex);
    return Status::ok();
  }
  if (type == "Split") {
    if (step.value("behavior", "") != "Isolated" || step.value("invert", false)) {
      return Status::invalid_argument("tokenizer.json: Split pre-tokenizer with behavior '" +
                                      step.value("behavior", "") + "'" + (step.value("invert", false) ? " inverted" : "") +
                                      " is not supported (only Isolated)");
    }
    const json& pattern = step.value("pattern", json::object());
    if (pattern.contains("Regex")) {
      v.pre_regexes.push_back(pattern["Regex"].get<std::string>());
    } else {
      return Status::invalid_argument("tokenizer.json: Split on a plain string is not supported");
    }
    return Status::ok();
  }
  if (type == "Metaspace") {  // SentencePiece-style text, as the Prepend+Replace normalizers
    const std::string scheme = step.value("prepend_scheme", "always");
    if (step.value("replacement", "\u2581") != "\u2581" || step.value("split", false) ||
        (scheme != "always" && scheme != "first" && scheme != "never")) {
      return Status::invalid_argument("tokenizer.json: Metaspace is supported with replacement \u2581, split false and prepend_scheme always/first/never");
    }
    v.byte_level = false;
    v.add_space_prefix = scheme != "never";
    v.space_prefix_first_only = scheme == "first";
    v.space_prefix_unless_space = true;
    return Status::ok();
  }
  if (type == "Digits") {
    v.pre_regexes.emplace_back(step.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
    return Status::ok();
  }
  return Status::invalid_argument("tokenizer.json: pre-tokenizer '" + type +
                                  "' is not supported (supported: ByteLevel, Split(Regex, Isolated), Digits, Metaspace, Sequence)");
}

// A token text named in tokenizer_config.json: a string or an AddedToken object.
std::string token_text(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return "";
}

Result<HfTokenizer> load(const std::string& dir);

}  // namespace

// A JSON value of an unexpected type makes nlohmann throw; that is bad input, not a crash.
Result<HfTokenizer> load_hf_tokenizer(const std::string& dir) {
  try {
    return load(dir);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(dir + ": unexpected tokenizer JSON (" + e.what() + ")");
  }
}

namespace {

Result<HfTokenizer> load(const std::string& dir) {
  const std::filesystem::path folder(dir);
  PAGODA_ASSIGN_OR_RETURN(json j, read_json(folder / "tokenizer.json"));
  json config = json::object();
  std::error_code ec;
  if (std::filesystem::exists(folder / "tokenizer_config.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(config, read_json(folder / "tokenizer_config.json"));
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return Status::invalid_argument(dir + "/tokenizer.json: no 'model' object");
  }
  const json& m = j["model"];
  if (type_of(m) != "BPE" && !(m.contains("merges") && !m.contains("type"))) {
    return Status::invalid_argument(dir + "/tokenizer.json: model type '" + type_of(m) + "' is not supported (supported: BPE)");
  }
  if (!m.contains("vocab") || !m["vocab"].is_object() || !m.contains("merges") || !m["merges"].is_array()) {
    return Status::invalid_argument(dir + "/tokenizer.json: BPE model without vocab or merges");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return Status::invalid_argument(dir + "/tokenizer.json: BPE " + key + " is not supported");
    }
  }

  Vocab v;
  v.model = VocabModel::kBpe;
  v.add_bos = false;
  v.add_space_prefix = false;
  v.bos_id = v.eos_id = v.unk_id = -1;
  v.ignore_merges = m.value("ignore_merges", false);
  // Ids: the model's vocab, then added tokens (which may reuse vocab ids). Gaps become UNUSED.
  int64_t n = 0;
  for (const auto& [text, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31) - 1) {
      return Status::invalid_argument(dir + "/tokenizer.json: token '" + text + "' has a bad id");
    }
    n = std::max(n, id.get<int64_t>() + 1);
  }
  const json added = j.value("added_tokens", json::array());
  for (const json& t : added) {
    if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (int64_t{1} << 31) - 1 || !t.contains("content") || !t["content"].is_string()) {
      return Status::invalid_argument(dir + "/tokenizer.json: an added token without a good id and content");
    }
    n = std::max(n, t["id"].get<int64_t>() + 1);
  }
  const auto entries = static_cast<int64_t>(m["vocab"].size() + added.size());
  if (n > entries + 65536) {  // ids far apart: a broken file, not a reason to allocate n tokens
    return Status::invalid_argument(dir + "/tokenizer.json: token ids go up to " + std::to_string(n - 1) +
                                    " for " + std::to_string(entries) + " tokens");
  }
  v.tokens.assign(static_cast<size_t>(n), "");
  v.types.assign(static_cast<size_t>(n), TokenType::kUnused);
  v.scores.assign(static_cast<size_t>(n), 0.0f);
  for (const auto& [text, id] : m["vocab"].items()) {
    v.tokens[id.get<size_t>()] = text;
    v.types[id.get<size_t>()] = TokenType::kNormal;
  }
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.types[id] == TokenType::kUnused) v.tokens[id] = "<pagoda_unused_" + std::to_string(id) + ">";
  }
  for (const json& t : added) {
    if (t.value("lstrip", false) || t.value("rstrip", false) || t.value("single_word", false)) {
      return Status::invalid_argument(dir + "/tokenizer.json: added token '" + t["content"].get<std::string>() +
                                      "' uses lstrip/rstrip/single_word, which is not supported");
    }
    const auto id = t["id"].get<size_t>();
    v.tokens[id] = t["content"].get<std::string>();
    v.types[id] = t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
  }
  for (const json& merge : m["merges"]) {
    if (merge.is_string()) {
      v.merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      v.merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      return Status::invalid_argument(dir + "/tokenizer.json: a merge is neither 'a b' nor [a, b]");
    }
  }

  PAGODA_RETURN_IF_ERROR(read_normalizer(j.value("normalizer", json()), v).with_context(dir));
  const bool spaces_replaced = !v.byte_level;
  bool byte_level_step = false;
  const json pre = j.value("pre_tokenizer", json());
  if (type_of(pre) == "Sequence") {
    for (const json& step : pre.value("pretokenizers", json::array())) {
      PAGODA_RETURN_IF_ERROR(read_pre_step(step, v, byte_level_step, spaces_replaced).with_context(dir));
    }
  } else if (!pre.is_null()) {
    PAGODA_RETURN_IF_ERROR(read_pre_step(pre, v, byte_level_step, spaces_replaced).with_context(dir));
  }
  if (v.byte_level && !byte_level_step && type_of(j.value("decoder", json())) != "ByteLevel") {
    return Status::invalid_argument(dir + "/tokenizer.json: a BPE model that is neither byte-level (ByteLevel pre-tokenizer or decoder) nor SentencePiece-style (Replace ' ' by \u2581) is not supported");
  }
  if (!v.byte_level) {
    if (!v.pre_regexes.empty()) return Status::invalid_argument(dir + "/tokenizer.json: a pre-tokenizer with SentencePiece-style text is not supported");
    if (!m.value("byte_fallback", false)) return Status::invalid_argument(dir + "/tokenizer.json: SentencePiece-style BPE without byte_fallback is not supported");
    for (size_t id = 0; id < v.tokens.size(); ++id) {
      const std::string& t = v.tokens[id];
      if (v.types[id] == TokenType::kNormal && t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>') v.types[id] = TokenType::kByte;
    }
  }
  // Name the pre-tokenizer when it is one llama.cpp knows (for GGUF files).
  v.pre = "";
  for (const char* name : {"llama-bpe", "qwen2", "deepseek-v3", "gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "default"}) {
    auto regexes = pre_tokenizer_regexes(name);
    if (v.byte_level && regexes.is_ok() && *regexes == v.pre_regexes) {
      v.pre = name;
      break;
    }
  }

  // Special token ids: model.unk_token; tokenizer_config bos/eos; BOS from the post-processor.
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t id = 0; id < v.tokens.size(); ++id) id_of.try_emplace(v.tokens[id], static_cast<int32_t>(id));
  auto find = [&](const std::string& text) { auto it = id_of.find(text); return it == id_of.end() ? -1 : it->second; };
  if (m.contains("unk_token") && m["unk_token"].is_string()) v.unk_id = find(m["unk_token"].get<std::string>());
  v.bos_id = find(token_text(config, "bos_token"));
  v.eos_id = find(token_text(config, "eos_token"));
  const json post = j.value("post_processor", json());
  if (type_of(post) == "TemplateProcessing" && post.contains("single") && post["single"].is_array() &&
      !post["single"].empty() && post["single"][0].contains("SpecialToken")) {
    const int32_t first = find(post["single"][0]["SpecialToken"].value("id", ""));
    if (first >= 0) {
      v.add_bos = true;
      if (v.bos_id < 0) v.bos_id = first;
    }
  }
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) v.add_bos = config["add_bos_token"].get<bool>();
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) v.add_eos = config["add_eos_token"].get<bool>();
  // generation_config.json: the ids generation stops at (an id or a list).
  std::vector<int32_t> eos_ids;
  if (v.eos_id >= 0) eos_ids.push_back(v.eos_id);
  if (std::filesystem::exists(folder / "generation_config.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(json gen, read_json(folder / "generation_config.json"));
    const json ids = gen.is_object() ? gen.value("eos_token_id", json()) : json();
    for (const json& id : ids.is_array() ? ids : json::array({ids})) {
      if (id.is_null()) continue;
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= static_cast<int64_t>(v.tokens.size())) {
        return Status::invalid_argument(dir + "/generation_config.json: eos_token_id " + id.dump() +
                                        " is not a token id of the vocabulary");
      }
      const auto eos = static_cast<int32_t>(id.get<int64_t>());
      if (std::find(eos_ids.begin(), eos_ids.end(), eos) == eos_ids.end()) eos_ids.push_back(eos);
    }
    if (v.eos_id < 0 && !eos_ids.empty()) v.eos_id = eos_ids.front();
  }
  if (v.add_bos && v.bos_id < 0) v.add_bos = false;  // nothing to add
  if (v.add_eos && v.eos_id < 0) v.add_eos = false;

  std::string chat_template;
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const json& named : t) {
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") && named["template"].is_string()) {
          chat_template = named["template"].get<std::string>();
        }
      }
    }
  }
  const int32_t bos = v.bos_id, eos = v.eos_id;
  const bool add_bos = v.add_bos;
  auto tokenizer = Tokenizer::create(std::move(v));
  if (!tokenizer.is_ok()) return tokenizer.status().with_context(dir + "/tokenizer.json");
  return HfTokenizer{std::move(*tokenizer), bos, eos, std::move(eos_ids), add_bos, std::move(chat_template)};
}

}  // namespace
}  // namespace pagoda::model
