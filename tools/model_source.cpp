#include "tools/model_source.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/gguf_vocab.h"
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
    return Status::error(path + ": is a directory (Hugging Face folders are not supported yet; pass a .gguf file)");
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

}  // namespace pagoda::tools
