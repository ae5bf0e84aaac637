// Shared set-up of the ServingEngine tests: stories260K (a real tiny model) behind a
// ServingEngine and a reference Engine on the same weights, and an observer that records.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "core/clock.h"
#include "core/log.h"
#include "engine/serving.h"
#include "model/text/gguf_vocab.h"
#include "test_data.h"

namespace pagoda::testing {

struct ChoiceRecord {
  std::vector<int32_t> tokens;
  std::string text;  // every delta + the end's text
  std::vector<engine::TokenEvent> events;
  std::optional<engine::FinishReason> reason;
};

class Recorder final : public engine::RequestObserver {
 public:
  void on_tokens(std::span<const engine::TokenEvent> events) override {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_FALSE(finished_) << "tokens after on_finish";
    for (const engine::TokenEvent& e : events) {
      ChoiceRecord& c = choices_[e.choice];
      EXPECT_FALSE(c.reason.has_value()) << "tokens after the choice ended";
      c.tokens.push_back(e.token);
      c.text += e.text;
      c.events.push_back(e);
    }
  }
  void on_choice_end(const engine::ChoiceEnd& end) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ChoiceRecord& c = choices_[end.choice];
    EXPECT_FALSE(c.reason.has_value()) << "choice ended twice";
    c.text += end.text;
    c.reason = end.reason;
  }
  void on_finish(const Status& status, const engine::RequestUsage& usage) override {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_FALSE(finished_) << "on_finish twice";
    finished_ = true;
    status_ = status;
    usage_ = usage;
    done_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_; });
  }
  bool finished() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }
  const Status& status() const { return status_; }
  const engine::RequestUsage& usage() const { return usage_; }
  const ChoiceRecord& choice(int i) { return choices_[i]; }

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::map<int, ChoiceRecord> choices_;
  bool finished_ = false;
  Status status_;
  engine::RequestUsage usage_;
};

struct Stories {
  ManualClock clock;
  Logger logger{LogLevel::kSilent};
  std::shared_ptr<const model::LlamaModel> model;
  std::shared_ptr<const model::Tokenizer> tokenizer;
  std::unique_ptr<engine::Engine> reference;  // f32 KV, same weights: Engine::generate
};

inline std::unique_ptr<Stories> load_stories(int64_t max_context = 512) {
  auto s = std::make_unique<Stories>();
  auto file = model::GgufFile::read(stories_dir() + "/stories260K.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  auto vocab = model::vocab_from_gguf(*file);
  s->tokenizer = std::make_shared<const model::Tokenizer>(model::Tokenizer::create(std::move(vocab).value()).value());
  s->model = model::LlamaModel::load(std::move(file).value()).value();
  engine::EngineConfig c;
  c.num_threads = 1;
  c.max_context = max_context;
  s->reference = engine::Engine::create(s->model, c, s->clock, s->logger).value();
  return s;
}

// A ServingEngine over its own Engine on the stories weights.
inline std::unique_ptr<engine::ServingEngine> serving(Stories& s, engine::EngineConfig ec, const engine::ServingConfig& sc,
                                                      std::shared_ptr<const model::Tokenizer> tokenizer = nullptr) {
  ec.num_threads = 1;
  if (ec.max_context == 0) ec.max_context = s.reference->max_context();
  auto e = engine::Engine::create(s.model, ec, s.clock, s.logger);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  auto se = engine::ServingEngine::create(std::move(e).value(), tokenizer ? tokenizer : s.tokenizer, sc);
  EXPECT_TRUE(se.is_ok()) << se.status().message();
  return std::move(se).value();
}

// Bytes of a pool of `blocks` KV blocks for the stories model.
inline int64_t pool_bytes(const Stories& s, int64_t blocks) {
  return blocks * s.reference->kv_layout().bytes_per_block();
}

inline const char* kStoryText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.";

// Prompt i of a mixed set: prefixes of different lengths (sharing a prefix) and other texts.
inline std::vector<int32_t> mixed_prompt(const model::Tokenizer& tok, int i) {
  static const char* kOthers[] = {"Tom and Lily", "The cat sat", "A big dog ran to the", "Sam had a red"};
  const std::string story = kStoryText;
  if (i % 2 == 0) return tok.encode(story.substr(0, 10 + (i * 37) % story.size()), true, false);
  return tok.encode(kOthers[(i / 2) % 4], true, false);
}

// Steps until no work is left (bounded, so a scheduler bug fails instead of hanging).
// The text a choice of `generated` tokens after `prompt` has: what decoding them together adds
// to the prompt's own text (a first piece keeps its leading space, engine::TextStream).
inline std::string continuation(const model::Tokenizer& tok, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& generated) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string whole = tok.decode(all), head = tok.decode(prompt);
  CHECK_EQ(whole.compare(0, head.size(), head), 0) << "the prompt's text is a prefix of the whole";
  return whole.substr(head.size());
}

inline void run_to_end(engine::ServingEngine& se, int64_t max_steps = 100000) {
  int64_t steps = 0;
  while (se.step()) ASSERT_LT(++steps, max_steps) << "the loop never ends";
}

inline void expect_clean(engine::ServingEngine& se) {
  se.check_integrity();
  const engine::ServingMetrics m = se.metrics();
  EXPECT_EQ(m.kv_blocks_in_use, 0);
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
  EXPECT_EQ(m.kv_blocks_total, se.engine().kv_plan().num_blocks);
  EXPECT_EQ(m.kv_blocks_in_use + m.kv_blocks_cached + m.kv_blocks_free, m.kv_blocks_total);
}

}  // namespace pagoda::testing
