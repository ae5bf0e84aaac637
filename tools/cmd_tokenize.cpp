// pagoda tokenize: text to token ids (one line, space-separated, or a JSON array).
// -m takes a GGUF (a vocab-only file is enough), a llama2.c checkpoint, or a Hugging Face
// folder holding tokenizer.json (+ tokenizer_config.json). --bench times the encoding instead;
// --write-gguf saves the tokenizer as a vocab-only GGUF.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/text/gguf_vocab.h"
#include "model/text/hf_tokenizer.h"
#include "tools/commands.h"
#include "tools/model_source.h"

namespace pagoda::tools {

namespace {

struct TokenizeOptions {
  std::string model_path, tokenizer_path, text, file, write_gguf;
  bool no_bos = false, parse_special = false, json = false, bench = false;
};

Result<model::Tokenizer> load_tokenizer(const TokenizeOptions& o) {
  std::error_code ec;
  if (!o.model_path.empty() && std::filesystem::is_directory(o.model_path, ec)) {
    if (!std::filesystem::exists(std::filesystem::path(o.model_path) / "tokenizer.json", ec)) {
      return Status::not_found(o.model_path + ": a folder without tokenizer.json");
    }
    PAGODA_ASSIGN_OR_RETURN(model::HfTokenizer hf, model::load_hf_tokenizer(o.model_path));
    return std::move(hf.tokenizer);
  }
  auto file = o.model_path.empty() ? load_model_file("", "")
                                   : model::GgufFile::read_metadata_only(o.model_path);
  if (!o.model_path.empty() && !file.is_ok()) file = load_model_file(o.model_path, o.tokenizer_path);
  if (!file.is_ok()) return file.status();
  auto tok = tokenizer_from_file(*file);
  if (!tok.is_ok()) return tok.status().with_context(o.model_path);
  return tok;
}

// Encodes the text once to warm up, then again timed; prints one JSON line.
int bench(const model::Tokenizer& tok, const std::string& text, bool parse_special) {
  (void)tok.encode(text.substr(0, 4096), false, parse_special);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, false, parse_special);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json j = {{"bytes", text.size()},
                      {"tokens", ids.size()},
                      {"seconds", seconds},
                      {"tokens_per_s", seconds > 0 ? static_cast<double>(ids.size()) / seconds : 0.0},
                      {"mb_per_s", seconds > 0 ? static_cast<double>(text.size()) / 1e6 / seconds : 0.0}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int tokenize(const TokenizeOptions& o) {
  std::string text = o.text;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) return fail(Status::error(o.file + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto tok = load_tokenizer(o);
  if (!tok.is_ok()) return fail(tok.status());
  if (!o.write_gguf.empty()) {
    model::GgufFile file;
    model::vocab_to_gguf(tok->vocab(), file);
    if (Status s = file.write(o.write_gguf); !s.is_ok()) return fail(s);
    std::fprintf(stderr, "wrote %s (%d tokens, vocab only)\n", o.write_gguf.c_str(), tok->vocab_size());
    if (text.empty()) return 0;
  }
  if (o.bench) return bench(*tok, text, o.parse_special);
  const bool add_bos = !o.no_bos && tok->vocab().add_bos && tok->bos_id() >= 0;
  const std::vector<int32_t> ids = tok->encode(text, add_bos, o.parse_special);
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
  cmd->add_option("-m,--model", o->model_path,
                  "GGUF (a vocab-only file is enough), llama2.c checkpoint, or a folder with tokenizer.json");
  cmd->add_option("--tokenizer", o->tokenizer_path, "tokenizer.bin for a llama2.c checkpoint");
  cmd->add_option("text", o->text, "text to tokenize");
  cmd->add_option("-f,--file", o->file, "read the text from a file");
  cmd->add_flag("--no-bos", o->no_bos, "do not prepend BOS");
  cmd->add_flag("--parse-special", o->parse_special, "turn special-token text such as <s> into those tokens");
  cmd->add_flag("--json", o->json, "print a JSON array");
  cmd->add_flag("--bench", o->bench,
                "time encoding the text (no BOS) and print bytes, tokens, seconds, tokens/s as JSON");
  cmd->add_option("--write-gguf", o->write_gguf, "also save the tokenizer as a vocab-only GGUF file");
  cmd->callback([o, &exit_code] { exit_code = tokenize(*o); });
}

}  // namespace pagoda::tools
