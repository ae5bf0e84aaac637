// stories260K (a real trained model): greedy generations must equal llama2.c run.c's output
// token for token and character for character, from the GGUF and from the llama2.c files;
// logits at positions 0-3 must match run.c's within 1e-4.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/text/gguf_vocab.h"
#include "model/format/llama2c.h"
#include "test_data.h"

namespace pagoda {
namespace {

struct Expected {
  std::vector<int32_t> prompt;
  std::vector<int32_t> sequence;
  std::string text;
};

std::vector<int32_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int32_t> ids;
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

Expected load_expected(const std::string& stem) {
  const std::string dir = testing::stories_dir() + "/expected/";
  std::ifstream in(dir + stem + ".tokens");
  EXPECT_TRUE(in.good()) << "missing " << dir + stem + ".tokens";
  Expected e;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("prompt:", 0) == 0) e.prompt = parse_ids(line.substr(7));
    if (line.rfind("sequence:", 0) == 0) e.sequence = parse_ids(line.substr(9));
  }
  e.text = testing::read_file_or_empty(dir + stem + ".txt");
  EXPECT_FALSE(e.text.empty()) << "missing " << dir + stem + ".txt";
  return e;
}

struct Loaded {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

Loaded load(bool from_llama2c, const Clock& clock, const Logger& logger) {
  const std::string dir = testing::stories_dir();
  auto file = from_llama2c ? model::import_llama2c(dir + "/stories260K.bin", dir + "/tok512.bin")
                           : model::GgufFile::read(dir + "/stories260K.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return {};
  auto vocab = model::vocab_from_gguf(*file);
  EXPECT_TRUE(vocab.is_ok()) << vocab.status().message();
  auto tok = model::Tokenizer::create(std::move(vocab).value());
  auto model = model::LlamaModel::load(std::move(file).value());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  engine::EngineConfig config;
  config.max_context = 512;  // the trained length
  config.num_threads = 2;
  auto eng = engine::Engine::create(std::move(model).value(), config, clock, logger);
  EXPECT_TRUE(eng.is_ok()) << eng.status().message();
  return {std::move(eng).value(), std::make_unique<model::Tokenizer>(std::move(tok).value())};
}

class StoriesGreedy : public ::testing::TestWithParam<bool> {};

TEST_P(StoriesGreedy, MatchesRunC) {
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  Loaded m = load(GetParam(), clock, logger);
  ASSERT_NE(m.engine, nullptr);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"greedy_n256", ""},
      {"greedy_n512", ""},
      {"greedy_prompt_once_upon_a_time_n256", "Once upon a time"},
      {"greedy_prompt_tom_and_lily_n256", "Tom and Lily"},
  };
  for (const auto& [stem, prompt] : cases) {
    SCOPED_TRACE(stem);
    const Expected e = load_expected(stem);
    ASSERT_FALSE(e.sequence.empty());
    engine::GenerateRequest req;
    req.prompt = m.tokenizer->encode(prompt, true, false);
    EXPECT_EQ(req.prompt, e.prompt);
    // run.c runs `steps` forward passes in all (prompt included) and stops when BOS is predicted.
    const int64_t steps = stem.find("n512") != std::string::npos ? 512 : 256;
    req.max_new_tokens = steps + 1 - static_cast<int64_t>(req.prompt.size());
    req.stop_token_ids = {m.tokenizer->bos_id()};
    auto result = m.engine->generate(req);
    ASSERT_TRUE(result.is_ok()) << result.status().message();
    std::vector<int32_t> sequence = req.prompt;
    sequence.insert(sequence.end(), result->tokens.begin(), result->tokens.end());
    EXPECT_EQ(sequence, e.sequence);
    // run.c prints every piece after BOS, without the final BOS, then a newline.
    std::vector<int32_t> printed(sequence.begin() + 1, sequence.end());
    if (!printed.empty() && printed.back() == m.tokenizer->bos_id()) printed.pop_back();
    EXPECT_EQ(m.tokenizer->decode(printed) + "\n", e.text);
    m.engine->block_manager().check_integrity();
    EXPECT_EQ(m.engine->block_manager().pool().num_in_use(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(GgufAndLlama2c, StoriesGreedy, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "llama2c" : "gguf"; });

TEST(StoriesLogits, MatchRunCWithin1e4) {
  const std::string path = testing::stories_dir() + "/expected/logits_bos_pos0-3.txt";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path;
  std::vector<int32_t> inputs;
  std::vector<std::vector<float>> want;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    int pos, input, next;
    ls >> pos >> input >> next;
    inputs.push_back(input);
    std::vector<float> row;
    std::string value;
    ls >> std::ws;
    while (std::getline(ls, value, ',')) row.push_back(std::stof(value));
    ASSERT_EQ(row.size(), 512u);
    want.push_back(row);
  }
  ASSERT_EQ(inputs.size(), 4u);
  ManualClock clock;
  Logger logger(LogLevel::kSilent);
  for (bool llama2c : {false, true}) {
    Loaded m = load(llama2c, clock, logger);
    ASSERT_NE(m.engine, nullptr);
    auto logits = m.engine->score(inputs);
    ASSERT_TRUE(logits.is_ok()) << logits.status().message();
    for (size_t p = 0; p < 4; ++p) {
      for (size_t i = 0; i < 512; ++i) {
        ASSERT_NEAR((*logits)[p * 512 + i], want[p][i], 1e-4) << "position " << p << " logit " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
