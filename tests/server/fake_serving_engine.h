// FakeServingEngine: a scripted ServingEngine for the HTTP layer's protocol tests (the real
// scheduler is tested in tests/engine). Each step, every unfinished choice emits one token:
// token k of choice c repeats the prompt, prompt[(k + c) % prompt.size()], with text from a
// real tokenizer's StreamDecoder. A choice ends with kStop on a stop token id (not emitted), or
// kLength after max_tokens. With logprobs, the chosen token gets -0.5 and the top entries are
// ids token+1.. with logprobs -1, -2, ...
//
// script_reply(tokens): every choice emits these tokens instead, then ends with kStop.
// Test hooks: pause() keeps the loop from stepping (requests stay queued: queue-full and
// disconnect tests); submitted() and aborted() record what the server asked for. Prefix
// caching is modelled too: a prompt submitted before with the same cache_salt reports all but
// its last token as cached_tokens (so salt isolation is visible through the API).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/serving.h"

namespace pagoda::testing {

class FakeServingEngine final : public engine::ServingEngine {
 public:
  FakeServingEngine(std::shared_ptr<const model::Tokenizer> tokenizer, int64_t max_context, size_t max_waiting)
      : tokenizer_(std::move(tokenizer)), max_context_(max_context), max_waiting_(max_waiting) {}
  ~FakeServingEngine() override { shutdown(false); }

  Result<engine::RequestId> submit(engine::CompletionRequest request,
                                   std::shared_ptr<engine::RequestObserver> observer) override {
    std::lock_guard lock(mutex_);
    if (refusing_) return Status::unavailable("shutting down");
    if (request.prompt.empty()) return Status::invalid_argument("empty prompt");
    for (int32_t id : request.prompt) {
      if (id < 0 || id >= tokenizer_->vocab_size()) return Status::invalid_argument("token id out of range");
    }
    if (static_cast<int64_t>(request.prompt.size()) + 1 > max_context_) {
      return Status::too_large("prompt of " + std::to_string(request.prompt.size()) + " tokens; the context holds " +
                               std::to_string(max_context_));
    }
    if (active_.size() >= max_waiting_) return Status::unavailable("queue full");
    Active a{next_id_++, request, std::move(observer), {}, false};
    for (int c = 0; c < request.n; ++c) a.choices.push_back(Choice{0, false, model::StreamDecoder(*tokenizer_)});
    submitted_.push_back(request);
    metrics_.prompt_tokens += static_cast<int64_t>(request.prompt.size());
    active_.push_back(std::move(a));
    cv_.notify_all();
    changed_.notify_all();
    return active_.back().id;
  }

  void abort(engine::RequestId id) override {
    std::lock_guard lock(mutex_);
    for (Active& a : active_) {
      if (a.id == id && !a.aborted) {
        a.aborted = true;
        aborted_.push_back(id);
      }
    }
    cv_.notify_all();
    changed_.notify_all();
  }

  void start() override {
    loop_ = std::thread([this] {
      std::unique_lock lock(mutex_);
      while (!stop_) {
        if (!paused_ && !active_.empty()) {
          lock.unlock();
          step();
          lock.lock();
        } else {
          cv_.wait(lock);
        }
      }
    });
  }

  void shutdown(bool drain) override {
    {
      std::unique_lock lock(mutex_);
      refusing_ = true;
      if (!drain) {
        for (Active& a : active_) a.aborted = true;
      }
      paused_ = false;
      cv_.notify_all();
      if (loop_.joinable()) idle_.wait(lock, [&] { return active_.empty(); });
      stop_ = true;
      cv_.notify_all();
    }
    if (loop_.joinable()) loop_.join();
  }

  bool step() override;

  engine::ServingMetrics metrics() const override {
    std::lock_guard lock(mutex_);
    engine::ServingMetrics m = metrics_;
    m.running = static_cast<int64_t>(active_.size());
    return m;
  }
  const engine::Engine& engine() const override {
    CHECK(false) << "FakeServingEngine has no Engine";
    std::abort();
  }
  const model::Tokenizer& tokenizer() const override { return *tokenizer_; }
  void check_integrity() override {}

  void script_reply(std::vector<int32_t> reply) {
    std::lock_guard lock(mutex_);
    reply_ = std::move(reply);
  }
  void pause(bool paused) {
    std::lock_guard lock(mutex_);
    paused_ = paused;
    cv_.notify_all();
  }
  std::vector<engine::CompletionRequest> submitted() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  std::vector<engine::RequestId> aborted() const {
    std::lock_guard lock(mutex_);
    return aborted_;
  }
  size_t num_active() const {
    std::lock_guard lock(mutex_);
    return active_.size();
  }
  // Blocks until pred() (called under the lock) holds after some change, at most 30 s.
  template <typename Pred>
  bool wait_for(Pred pred) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), pred);
  }

 public:
  // For wait_for predicates (read under the lock).
  size_t active_locked() const { return active_.size(); }
  size_t aborted_locked() const { return aborted_.size(); }

 private:
  struct Choice {
    int64_t produced = 0;
    bool done = false;
    model::StreamDecoder decoder;
  };
  struct Active {
    engine::RequestId id;
    engine::CompletionRequest request;
    std::shared_ptr<engine::RequestObserver> observer;
    std::vector<Choice> choices;
    bool aborted;
  };

  std::shared_ptr<const model::Tokenizer> tokenizer_;
  int64_t max_context_;
  size_t max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable cv_, idle_, changed_;  // changed_: any submit, abort or step
  std::vector<Active> active_;
  std::vector<engine::CompletionRequest> submitted_;
  std::vector<std::pair<std::vector<int32_t>, std::string>> seen_;  // (prompt, salt) finished
  std::vector<engine::RequestId> aborted_;
  engine::ServingMetrics metrics_;
  engine::RequestId next_id_ = 1;
  std::vector<int32_t> reply_;  // script_reply
  bool paused_ = false, refusing_ = false, stop_ = false;
  std::thread loop_;
};

inline bool FakeServingEngine::step() {
  struct Out {
    std::shared_ptr<engine::RequestObserver> observer;
    std::vector<engine::TokenEvent> tokens;
    std::vector<engine::ChoiceEnd> ends;
    bool finish = false;
    Status status;
    engine::RequestUsage usage;
  };
  std::vector<Out> outs;
  {
    std::lock_guard lock(mutex_);
    if (active_.empty()) return false;
    ++metrics_.steps;
    for (auto it = active_.begin(); it != active_.end();) {
      Active& a = *it;
      Out o;
      o.observer = a.observer;
      o.usage.prompt_tokens = static_cast<int64_t>(a.request.prompt.size());
      const auto key = std::make_pair(a.request.prompt, a.request.cache_salt);
      if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) o.usage.cached_tokens = o.usage.prompt_tokens - 1;
      bool all_done = true;
      for (int c = 0; c < static_cast<int>(a.choices.size()) && !a.aborted; ++c) {
        Choice& ch = a.choices[static_cast<size_t>(c)];
        if (ch.done) continue;
        const auto& prompt = a.request.prompt;
        if (!reply_.empty() && ch.produced == static_cast<int64_t>(reply_.size())) {
          ch.done = true;
          o.ends.push_back({c, engine::FinishReason::kStop, ch.decoder.flush()});
          continue;
        }
        const int32_t token = !reply_.empty() ? reply_[static_cast<size_t>(ch.produced)]
                                              : prompt[static_cast<size_t>((ch.produced + c) % static_cast<int64_t>(prompt.size()))];
        const auto& stops = a.request.stop_token_ids;
        if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
          ch.done = true;
          o.ends.push_back({c, engine::FinishReason::kStop, ch.decoder.flush()});
          continue;
        }
        engine::TokenEvent e;
        e.choice = c;
        e.token = token;
        e.text = ch.decoder.push(token);
        if (a.request.logprobs >= 0) {
          e.chosen = {token, -0.5f};
          for (int i = 0; i < a.request.logprobs; ++i) {
            e.top.push_back({(token + 1 + i) % tokenizer_->vocab_size(), -1.0f - static_cast<float>(i)});
          }
        }
        ++ch.produced;
        ++metrics_.generation_tokens;
        o.tokens.push_back(std::move(e));
        if (ch.produced >= a.request.max_tokens) {
          ch.done = true;
          o.ends.push_back({c, engine::FinishReason::kLength, ch.decoder.flush()});
        }
        all_done = all_done && ch.done;
      }
      for (const Choice& ch : a.choices) {
        all_done = all_done && ch.done;
        o.usage.completion_tokens += ch.produced;
      }
      if (a.aborted) {
        o.finish = true;
        o.status = Status::aborted("aborted");
        ++metrics_.finished_abort;
      } else if (all_done) {
        o.finish = true;
        ++metrics_.finished_length;
        seen_.push_back(key);
      }
      outs.push_back(std::move(o));
      it = outs.back().finish ? active_.erase(it) : it + 1;
    }
    if (active_.empty()) idle_.notify_all();
    changed_.notify_all();
  }
  for (Out& o : outs) {
    if (!o.tokens.empty()) o.observer->on_tokens(o.tokens);
    for (const engine::ChoiceEnd& end : o.ends) o.observer->on_choice_end(end);
    if (o.finish) o.observer->on_finish(o.status, o.usage);
  }
  return true;
}

}  // namespace pagoda::testing
