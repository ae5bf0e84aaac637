// RequestStream: hands one HTTP request's generation events from the engine loop thread to the
// HTTP thread that answers it.
//
// One HTTP request may be several engine requests (a completions call with k prompts: engine
// request p carries choices [p*n, (p+1)*n)). The engine thread calls the observers (never
// blocking: it appends under a mutex and notifies); the HTTP thread waits with a timeout (so it
// can check its client between events) and takes everything queued so far.
//
// States: running -> finished (every engine request delivered its on_finish). status() is the
// first failure of any of them (ok when all succeeded); usage() sums them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/serving.h"

namespace pagoda::server {

// Text (and tokens) one choice produced in one step, or the end of that choice.
struct ChoiceEvent {
  int choice = 0;                             // across all prompts: prompt * n + choice
  std::string text;                           // released text (may be empty)
  std::vector<engine::TokenEvent> tokens;     // the tokens behind it (logprobs)
  bool end = false;                           // the choice ended with `reason`
  engine::FinishReason reason = engine::FinishReason::kLength;
};

class RequestStream : public std::enable_shared_from_this<RequestStream> {
 public:
  RequestStream(int num_prompts, int n);

  // The observer to submit engine request `prompt` with.
  std::shared_ptr<engine::RequestObserver> observer(int prompt);

  // Waits until events are queued or all requests finished, at most timeout_s. True when there
  // is something to take or the stream is finished.
  bool wait(double timeout_s);
  std::vector<ChoiceEvent> take();
  bool finished() const;
  Status status() const;
  engine::RequestUsage usage() const;  // summed over the prompts (times: the latest)

  // Engine-thread side (through the observers).
  void on_tokens(int offset, std::span<const engine::TokenEvent> events);
  void on_choice_end(int offset, const engine::ChoiceEnd& end);
  void on_finish(const Status& status, const engine::RequestUsage& usage);

 private:
  const int n_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<ChoiceEvent> events_;  // queued, in arrival order
  int unfinished_;                   // engine requests still without on_finish
  Status status_;
  engine::RequestUsage usage_;
};

}  // namespace pagoda::server
