// Upstream: one HTTP request from the router to a worker, run on a thread of its own so the
// router's handler can wait for its status line, decide (pass through, or retry elsewhere while
// nothing has reached its client), and then hand on the body as it arrives: an SSE stream
// passes through chunk by chunk, never buffered whole.
//
// States: connecting -> headers (status and headers known) -> body (bytes arriving) -> done;
// or failed (connection refused, reset, timed out: `error` says which) from any state before
// done. cancel() (the router's client left) stops the transfer at once (the socket is shut
// down, so the worker sees its client go and aborts the request).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Client;
}  // namespace httplib

namespace pagoda::router {

struct UpstreamRequest {
  std::string host;
  int port = 0;
  std::string method = "POST";   // POST or GET
  std::string path;
  std::multimap<std::string, std::string> headers;
  std::string body;
  std::string content_type = "application/json";
  double connect_timeout_s = 2;
  double read_timeout_s = 600;   // between bytes
};

class Upstream {
 public:
  enum class State { kConnecting, kHeaders, kBody, kDone, kFailed };

  explicit Upstream(UpstreamRequest request);
  ~Upstream();  // cancels and joins
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // Waits up to timeout_s for the state to pass `state` (or end); returns the state then.
  State wait_past(State state, double timeout_s);
  // Moves the body bytes received so far into out (appending); waits up to timeout_s when there
  // are none and the transfer goes on. Returns the state.
  State take(std::string& out, double timeout_s);
  void cancel();

  State state() const;
  int status() const;                            // once past kConnecting
  std::string header(const std::string& name) const;
  std::string error() const;                     // when failed
  bool received_body() const;                    // any body byte arrived

 private:
  void run();

  UpstreamRequest request_;
  std::unique_ptr<httplib::Client> client_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  State state_ = State::kConnecting;
  int status_ = 0;
  std::multimap<std::string, std::string> response_headers_;
  std::string pending_;          // body bytes not taken yet
  bool any_body_ = false;
  bool cancelled_ = false;
  std::string error_;
  std::thread thread_;
};

}  // namespace pagoda::router
