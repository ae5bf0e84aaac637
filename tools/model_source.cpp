#include "tools/model_source.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/arch/registry.h"
#include "model/text/gguf_vocab.h"
#include "model/format/hf_checkpoint.h"
#include "model/text/hf_tokenizer.h"
#include "model/format/llama2c.h"
#include "model/model_factory.h"
#include "tools/progress.h"

namespace pagoda::tools {

namespace {
bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}
}  // namespace

Result<model::GgufFile> load_model_file(const std::string& path, const std::string& tokenizer_path, bool progress) {
  if (path.empty()) return model::make_default_model();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::error(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    if (model::is_hf_model_dir(path)) {
      return Status::invalid_argument(path + ": is a Hugging Face folder; this command reads only GGUF and llama2.c files");
    }
    return Status::error(path + ": is a directory without config.json (neither a Hugging Face model folder nor a model file)");
  }
  if (starts_with_gguf_magic(path)) {
    ProgressBar bar("loading " + std::filesystem::path(path).filename().string(), progress);
    return model::GgufFile::read(path, [&](uint64_t done, uint64_t total) {
      bar.update(static_cast<int64_t>(done), static_cast<int64_t>(total));
    });
  }
  std::string tok = tokenizer_path;
  if (tok.empty()) {
    const auto dir = std::filesystem::path(path).parent_path();
    for (const char* name : {"tokenizer.bin", "tok512.bin"}) {
      if (std::filesystem::exists(dir / name, ec)) {
        tok = (dir / name).string();
        break;
      }
    }
    if (tok.empty()) {
      return Status::error(path + ": not a GGUF file; reading it as a llama2.c checkpoint needs --tokenizer TOKENIZER.bin");
    }
  }
  return model::import_llama2c(path, tok);
}

Result<model::Tokenizer> tokenizer_from_file(const model::GgufFile& file) {
  PAGODA_ASSIGN_OR_RETURN(model::Vocab vocab, model::vocab_from_gguf(file));
  return model::Tokenizer::create(std::move(vocab));
}

Result<model::HfTokenizer> tokenizer_from_hf_folder(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json", ec)) {
    return Status::not_found(dir + ": no tokenizer.json (a Hugging Face model folder needs tokenizer.json and "
                             "tokenizer_config.json beside config.json)");
  }
  return model::load_hf_tokenizer(dir);
}

Result<LoadedTokenizer> load_tokenizer(const std::string& path, const std::string& tokenizer_path) {
  LoadedTokenizer loaded;
  if (model::is_hf_model_dir(path)) {
    PAGODA_ASSIGN_OR_RETURN(model::HfTokenizer hf, tokenizer_from_hf_folder(path));
    loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(hf.tokenizer));
    loaded.chat_template = std::move(hf.chat_template);
    return loaded;
  }
  PAGODA_ASSIGN_OR_RETURN(model::GgufFile file, load_model_file(path, tokenizer_path));
  PAGODA_ASSIGN_OR_RETURN(model::Tokenizer tokenizer, tokenizer_from_file(file));
  loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(tokenizer));
  loaded.chat_template = file.get_string("tokenizer.chat_template").value_or("");
  return loaded;
}

Result<LoadedModel> load_model(const std::string& path, const std::string& tokenizer_path, bool progress) {
  LoadedModel loaded;
  const std::string name = path.empty() ? std::string("built-in default model") : path;
  if (model::is_hf_model_dir(path)) {
    PAGODA_ASSIGN_OR_RETURN(model::HfCheckpoint checkpoint, model::HfCheckpoint::open(path));
    PAGODA_ASSIGN_OR_RETURN(loaded.model, model::LlamaModel::load(std::move(checkpoint)));
    PAGODA_ASSIGN_OR_RETURN(model::HfTokenizer hf, tokenizer_from_hf_folder(path));
    loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(hf.tokenizer));
    loaded.chat_template = std::move(hf.chat_template);
    for (int32_t id : hf.eos_ids) {
      if (id != loaded.tokenizer->eos_id()) loaded.stop_token_ids.push_back(id);
    }
  } else {
    if (!path.empty() && starts_with_gguf_magic(path)) {  // refused from the header, before any weight is read
      auto header = model::GgufFile::read_metadata_only(path);
      if (!header.is_ok()) return header.status().with_context(name);
      if (auto family = model::arch::check_runnable(*header); !family.is_ok()) return family.status().with_context(name);
    }
    PAGODA_ASSIGN_OR_RETURN(model::GgufFile file, load_model_file(path, tokenizer_path, progress));
    PAGODA_ASSIGN_OR_RETURN(model::Tokenizer tokenizer, tokenizer_from_file(file));
    loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(tokenizer));
    loaded.chat_template = file.get_string("tokenizer.chat_template").value_or("");
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
      const int64_t id = file.get_int(key).value_or(-1);
      if (id >= 0 && id < loaded.tokenizer->vocab_size() && id != loaded.tokenizer->eos_id()) {
        loaded.stop_token_ids.push_back(static_cast<int32_t>(id));
      }
    }
    auto model = model::LlamaModel::load(std::move(file));
    if (!model.is_ok()) return model.status().with_context(name);
    loaded.model = std::move(model).value();
  }
  const int64_t n_vocab = loaded.model->config().n_vocab;
  if (loaded.tokenizer->vocab_size() < n_vocab) {
    // Embedding rows past the tokenizer (Qwen: 151669 tokens, 151936 rows) become unused
    // tokens that decode to nothing, so a sampled padding id is text "", not an abort.
    model::Vocab vocab = loaded.tokenizer->vocab();
    for (int64_t id = static_cast<int64_t>(vocab.tokens.size()); id < n_vocab; ++id) {
      vocab.tokens.push_back("<pagoda_unused_" + std::to_string(id) + ">");
      vocab.types.push_back(model::TokenType::kUnused);
      vocab.scores.push_back(0.0f);
    }
    PAGODA_ASSIGN_OR_RETURN(model::Tokenizer padded, model::Tokenizer::create(std::move(vocab)));
    loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(padded));
  }
  if (loaded.tokenizer->vocab_size() > n_vocab) {
    return Status::invalid_argument(name + ": the tokenizer has " + std::to_string(loaded.tokenizer->vocab_size()) +
                                    " tokens, more than the model's vocabulary of " +
                                    std::to_string(n_vocab));
  }
  return loaded;
}

}  // namespace pagoda::tools
