#include "tools/model_source.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/gguf_vocab.h"
#include "model/hf_checkpoint.h"
#include "model/llama2c.h"
#include "model/model_factory.h"

namespace pagoda::tools {

namespace {
bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}
}  // namespace

Result<model::GgufFile> load_model_file(const std::string& path, const std::string& tokenizer_path) {
  if (path.empty()) return model::make_default_model();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::error(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    if (model::is_hf_model_dir(path)) {
      return Status::invalid_argument(path + ": is a Hugging Face folder; this command reads only GGUF and llama2.c files");
    }
    return Status::error(path + ": is a directory without config.json (neither a Hugging Face model folder nor a model file)");
  }
  if (starts_with_gguf_magic(path)) return model::GgufFile::read(path);
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

Result<model::Tokenizer> tokenizer_from_hf_folder(const std::string& dir) {
  return Status::unavailable(dir + ": reading tokenizer.json is not available in this build");
}

Result<LoadedModel> load_model(const std::string& path, const std::string& tokenizer_path) {
  LoadedModel loaded;
  const std::string name = path.empty() ? std::string("built-in default model") : path;
  if (model::is_hf_model_dir(path)) {
    PAGODA_ASSIGN_OR_RETURN(model::HfCheckpoint checkpoint, model::HfCheckpoint::open(path));
    PAGODA_ASSIGN_OR_RETURN(loaded.model, model::LlamaModel::load(std::move(checkpoint)));
    PAGODA_ASSIGN_OR_RETURN(model::Tokenizer tokenizer, tokenizer_from_hf_folder(path));
    loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(tokenizer));
  } else {
    PAGODA_ASSIGN_OR_RETURN(model::GgufFile file, load_model_file(path, tokenizer_path));
    PAGODA_ASSIGN_OR_RETURN(model::Tokenizer tokenizer, tokenizer_from_file(file));
    loaded.tokenizer = std::make_unique<model::Tokenizer>(std::move(tokenizer));
    auto model = model::LlamaModel::load(std::move(file));
    if (!model.is_ok()) return model.status().with_context(name);
    loaded.model = std::move(model).value();
  }
  if (loaded.tokenizer->vocab_size() > loaded.model->config().n_vocab) {
    return Status::invalid_argument(name + ": the tokenizer has " + std::to_string(loaded.tokenizer->vocab_size()) +
                                    " tokens, more than the model's vocabulary of " +
                                    std::to_string(loaded.model->config().n_vocab));
  }
  return loaded;
}

}  // namespace pagoda::tools
