// pagoda tokenize: text to token ids (one line, space-separated, or a JSON array).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/commands.h"
#include "tools/model_source.h"

namespace pagoda::tools {

namespace {

struct TokenizeOptions {
  std::string model_path, tokenizer_path, text, file;
  bool no_bos = false, parse_special = false, json = false;
};

int tokenize(const TokenizeOptions& o) {
  std::string text = o.text;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) return fail(Status::error(o.file + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto file = o.model_path.empty() ? load_model_file("", "")
                                   : model::GgufFile::read_metadata_only(o.model_path);
  if (!o.model_path.empty() && !file.is_ok()) file = load_model_file(o.model_path, o.tokenizer_path);
  if (!file.is_ok()) return fail(file.status());
  auto tok = tokenizer_from_file(*file);
  if (!tok.is_ok()) return fail(tok.status().with_context(o.model_path));
  const std::vector<int32_t> ids = tok->encode(text, !o.no_bos && tok->vocab().add_bos, o.parse_special);
  if (o.json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  cmd->add_option("-m,--model", o->model_path, "GGUF (a vocab-only file is enough) or llama2.c checkpoint");
  cmd->add_option("--tokenizer", o->tokenizer_path, "tokenizer.bin for a llama2.c checkpoint");
  cmd->add_option("text", o->text, "text to tokenize");
  cmd->add_option("-f,--file", o->file, "read the text from a file");
  cmd->add_flag("--no-bos", o->no_bos, "do not prepend BOS");
  cmd->add_flag("--parse-special", o->parse_special, "turn special-token text such as <s> into those tokens");
  cmd->add_flag("--json", o->json, "print a JSON array");
  cmd->callback([o, &exit_code] { exit_code = tokenize(*o); });
}

}  // namespace pagoda::tools
