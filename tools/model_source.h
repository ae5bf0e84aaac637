// Where a command's model comes from: a GGUF file, a llama2.c checkpoint (+ tokenizer.bin),
// a Hugging Face folder (config.json + safetensors + tokenizer.json), or, with no path, the
// built-in default model. Composition-root code (tools/ only).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/format/gguf.h"
#include "model/text/hf_tokenizer.h"
#include "model/llama_model.h"
#include "model/text/tokenizer.h"

namespace pagoda::tools {

// path "": the default model. A file not starting with "GGUF" is read as llama2.c, whose
// tokenizer is `tokenizer_path`, or tokenizer.bin / tok512.bin beside it. A folder is an
// error here (see load_model).
// progress: a bar on a terminal while a GGUF file is read (tools/progress.h).
Result<model::GgufFile> load_model_file(const std::string& path, const std::string& tokenizer_path,
                                        bool progress = false);

// Tokenizer from a model file's metadata.
Result<model::Tokenizer> tokenizer_from_file(const model::GgufFile& file);

// Tokenizer (with bos/eos, add_bos and the chat template) of a Hugging Face folder:
// tokenizer.json + tokenizer_config.json (model/text/hf_tokenizer.h).
Result<model::HfTokenizer> tokenizer_from_hf_folder(const std::string& dir);

// The tokenizer and chat template of any model source, without its weights (what
// `pagoda router` needs: a vocab-only GGUF is enough).
struct LoadedTokenizer {
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::string chat_template;  // as LoadedModel::chat_template
};
Result<LoadedTokenizer> load_tokenizer(const std::string& path, const std::string& tokenizer_path);

struct LoadedModel {
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<model::Tokenizer> tokenizer;  // its vocab() holds bos/eos ids and add_bos
  std::string chat_template;  // tokenizer_config.json or GGUF tokenizer.chat_template; "" if none
  // Ids that end a generation besides the tokenizer's EOS: generation_config.json's
  // eos_token_id list, or GGUF tokenizer.ggml.eot_token_id / eom_token_id.
  std::vector<int32_t> stop_token_ids;
};

// Weights and tokenizer of any model source; a folder holding config.json is a Hugging Face
// folder. Errors name the path.
Result<LoadedModel> load_model(const std::string& path, const std::string& tokenizer_path, bool progress = false);

}  // namespace pagoda::tools
