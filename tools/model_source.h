// Where a command's model comes from: a GGUF file, a llama2.c checkpoint (+ tokenizer.bin),
// or, with no path, the built-in default model. Composition-root code (tools/ only).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace pagoda::tools {

// path "": the default model. A file not starting with "GGUF" is read as llama2.c, whose
// tokenizer is `tokenizer_path`, or tokenizer.bin / tok512.bin beside it.
Result<model::GgufFile> load_model_file(const std::string& path, const std::string& tokenizer_path);

// Tokenizer from a model file's metadata.
Result<model::Tokenizer> tokenizer_from_file(const model::GgufFile& file);

}  // namespace pagoda::tools
