#include "router/upstream.h"

#include <httplib.h>

#include <strings.h>

#include <chrono>

namespace pagoda::router {

namespace {

std::chrono::microseconds micros(double s) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(s));
}

}  // namespace

Upstream::Upstream(UpstreamRequest request)
    : request_(std::move(request)), client_(std::make_unique<httplib::Client>(request_.host, request_.port)) {
  client_->set_connection_timeout(micros(request_.connect_timeout_s));
  client_->set_read_timeout(micros(request_.read_timeout_s));
  client_->set_write_timeout(micros(request_.read_timeout_s));
  client_->set_keep_alive(false);
  thread_ = std::thread([this] { run(); });
}

Upstream::~Upstream() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

void Upstream::run() {
  httplib::Request req;
  req.method = request_.method;
  req.path = request_.path;
  for (const auto& [k, v] : request_.headers) req.headers.emplace(k, v);
  if (request_.method == "POST") {
    req.body = request_.body;
    req.headers.emplace("Content-Type", request_.content_type);
  }
  req.response_handler = [this](const httplib::Response& r) {
    std::lock_guard lock(mutex_);
    status_ = r.status;
    response_headers_.clear();
    for (const auto& [k, v] : r.headers) response_headers_.emplace(k, v);
    state_ = State::kHeaders;
    cv_.notify_all();
    return !cancelled_;
  };
  req.content_receiver = [this](const char* data, size_t size, uint64_t, uint64_t) {
    std::lock_guard lock(mutex_);
    pending_.append(data, size);
    any_body_ = any_body_ || size > 0;
    state_ = State::kBody;
    cv_.notify_all();
    return !cancelled_;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool ok = client_->send(req, res, error);
  std::lock_guard lock(mutex_);
  if (ok && !cancelled_) {
    if (status_ == 0) status_ = res.status;
    state_ = State::kDone;
  } else {
    state_ = State::kFailed;
    error_ = cancelled_ ? "cancelled" : httplib::to_string(error);
  }
  cv_.notify_all();
}

Upstream::State Upstream::wait_past(State state, double timeout_s) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    return static_cast<int>(state_) > static_cast<int>(state) || state_ == State::kFailed || state_ == State::kDone;
  });
  return state_;
}

Upstream::State Upstream::take(std::string& out, double timeout_s) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
               [&] { return !pending_.empty() || state_ == State::kDone || state_ == State::kFailed; });
  out.append(pending_);
  pending_.clear();
  return state_;
}

void Upstream::cancel() {
  {
    std::lock_guard lock(mutex_);
    if (state_ == State::kDone || state_ == State::kFailed || cancelled_) return;
    cancelled_ = true;
  }
  client_->stop();  // shuts the socket down: a blocked read returns now
}

Upstream::State Upstream::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

int Upstream::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

std::string Upstream::header(const std::string& name) const {
  std::lock_guard lock(mutex_);
  for (const auto& [k, v] : response_headers_) {
    if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
  }
  return {};
}

std::string Upstream::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

bool Upstream::received_body() const {
  std::lock_guard lock(mutex_);
  return any_body_;
}

}  // namespace pagoda::router
