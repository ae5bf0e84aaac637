#include "server/request_stream.h"

#include <algorithm>
#include <chrono>

namespace pagoda::server {

namespace {

class PromptObserver final : public engine::RequestObserver {
 public:
  PromptObserver(std::shared_ptr<RequestStream> stream, int offset) : stream_(std::move(stream)), offset_(offset) {}
  void on_tokens(std::span<const engine::TokenEvent> events) override { stream_->on_tokens(offset_, events); }
  void on_choice_end(const engine::ChoiceEnd& end) override { stream_->on_choice_end(offset_, end); }
  void on_finish(const Status& status, const engine::RequestUsage& usage) override { stream_->on_finish(status, usage); }

 private:
  std::shared_ptr<RequestStream> stream_;
  int offset_;
};

}  // namespace

RequestStream::RequestStream(int num_prompts, int n) : n_(n), unfinished_(num_prompts) {}

std::shared_ptr<engine::RequestObserver> RequestStream::observer(int prompt) {
  return std::make_shared<PromptObserver>(shared_from_this(), prompt * n_);
}

bool RequestStream::wait(double timeout_s) {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                      [&] { return !events_.empty() || unfinished_ == 0; });
}

std::vector<ChoiceEvent> RequestStream::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(events_, {});
}

bool RequestStream::finished() const {
  std::lock_guard lock(mutex_);
  return unfinished_ == 0;
}

Status RequestStream::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

engine::RequestUsage RequestStream::usage() const {
  std::lock_guard lock(mutex_);
  return usage_;
}

void RequestStream::on_tokens(int offset, std::span<const engine::TokenEvent> events) {
  {
    std::lock_guard lock(mutex_);
    const size_t first = events_.size();
    for (const engine::TokenEvent& e : events) {
      // One ChoiceEvent per choice per call: find this call's event of the choice.
      auto it = std::find_if(events_.begin() + static_cast<std::ptrdiff_t>(first), events_.end(),
                             [&](const ChoiceEvent& c) { return c.choice == offset + e.choice && !c.end; });
      if (it == events_.end()) {
        events_.push_back(ChoiceEvent{offset + e.choice, {}, {}, false, engine::FinishReason::kLength});
        it = events_.end() - 1;
      }
      it->text += e.text;
      it->tokens.push_back(e);
    }
  }
  cv_.notify_all();
}

void RequestStream::on_choice_end(int offset, const engine::ChoiceEnd& end) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(ChoiceEvent{offset + end.choice, end.text, {}, true, end.reason});
  }
  cv_.notify_all();
}

void RequestStream::on_finish(const Status& status, const engine::RequestUsage& usage) {
  {
    std::lock_guard lock(mutex_);
    if (status_.is_ok() && !status.is_ok()) status_ = status;
    usage_.prompt_tokens += usage.prompt_tokens;
    usage_.completion_tokens += usage.completion_tokens;
    usage_.cached_tokens += usage.cached_tokens;
    usage_.num_cached_sources = std::max(usage_.num_cached_sources, usage.num_cached_sources);
    for (int i = 0; i < usage.num_cached_sources; ++i) {
      usage_.cached_by_tier[static_cast<size_t>(i)].tier = usage.cached_by_tier[static_cast<size_t>(i)].tier;
      usage_.cached_by_tier[static_cast<size_t>(i)].tokens += usage.cached_by_tier[static_cast<size_t>(i)].tokens;
    }
    usage_.preemptions += usage.preemptions;
    usage_.queue_s = std::max(usage_.queue_s, usage.queue_s);
    usage_.ttft_s = std::max(usage_.ttft_s, usage.ttft_s);
    usage_.e2e_s = std::max(usage_.e2e_s, usage.e2e_s);
    --unfinished_;
  }
  cv_.notify_all();
}

}  // namespace pagoda::server
