#include "server/http/listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "server/http/connection_gate.h"
#include "server/http/errors.h"

namespace pagoda::http {
namespace {

// httplib's task queue interface over a ConnectionGate.
class GateQueue : public httplib::TaskQueue {
 public:
  GateQueue(size_t max_connections, size_t overflow_threads) : gate_(max_connections, overflow_threads) {}
  void enqueue(std::function<void()> fn) override { gate_.enqueue(std::move(fn)); }
  void shutdown() override { gate_.shutdown(); }

 private:
  ConnectionGate gate_;
};

}  // namespace

HttpListener::HttpListener(ListenerConfig config, const Logger& logger)
    : config_(std::move(config)), logger_(logger), http_(std::make_unique<httplib::Server>()) {
  const int threads = std::max(1, config_.threads);
  const int overflow = std::max(1, config_.overflow_threads);
  http_->new_task_queue = [threads, overflow] {
    return new GateQueue(static_cast<size_t>(threads), static_cast<size_t>(overflow));
  };
  http_->set_payload_max_length(config_.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(std::max(1, config_.read_timeout_s), 0);
  http_->set_keep_alive_timeout(std::max(1, config_.idle_timeout_s));
  // Before any body is read: a connection over the limit (on the gate's overflow threads) gets a
  // clear 503, and a chunked body (whose size httplib 0.11 does not bound by the body limit) a
  // 411; both say "Connection: close" (the client closes; httplib 0.11 itself keeps reading the
  // connection until its read timeout).
  http_->set_pre_routing_handler([threads](const httplib::Request& req, httplib::Response& res) {
    const bool over = ConnectionGate::over_limit();
    const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
    if (!over && !chunked) return httplib::Server::HandlerResponse::Unhandled;
    if (over) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(error_body(503, "Too many connections: the server serves " + std::to_string(threads) +
                                          " at once (--http-threads); retry later", "", "too_many_connections"),
                      "application/json");
    } else {
      res.status = 411;
      res.set_content(error_body(411, "Chunked request bodies are not accepted: send Content-Length", "",
                                 "length_required"),
                      "application/json");
    }
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib 0.11 listens with a backlog of 5 (compiled into Debian's library): a burst of
  // clients overflows it and some connections are reset. Remember the listening socket (the
  // options hook sees it before bind) so bind() can raise the backlog with a second listen().
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);  // SO_REUSEADDR / SO_REUSEPORT, as without the hook
    listen_socket_ = sock;
  });
  // httplib's own answers (unknown route, body too large, unparsable request) get an error object.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "Unknown route: " + req.method + " " + req.path;
    if (res.status == 413) message = "The request body is larger than the server accepts";
    if (res.status == 400) message = "Malformed HTTP request";
    res.set_content(error_body(res.status, message), "application/json");
  });
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    logger_.error("HTTP handler failed: " + what);
    res.status = 500;
    res.set_content(error_body(500, "internal error: " + what), "application/json");
  });
}

HttpListener::~HttpListener() { stop(); }

Result<int> HttpListener::bind() {
  int port = config_.port;
  if (config_.port == 0) {
    port = http_->bind_to_any_port(config_.host);
    if (port <= 0) return Status::error("cannot bind " + config_.host + " to a free port");
  } else if (!http_->bind_to_port(config_.host, config_.port)) {
    return Status::error("cannot bind " + config_.host + ":" + std::to_string(config_.port) +
                         " (in use, or not an address of this machine)");
  }
  // Linux takes a new backlog from listen() on a listening socket.
  if (listen_socket_ >= 0 && ::listen(listen_socket_, kListenBacklog) != 0) {
    return Status::error("listen(" + std::to_string(kListenBacklog) + ") failed on " + config_.host);
  }
  return port;
}

void HttpListener::listen() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    if (stop_requested_) return;
    listening_.store(true);
  }
  http_->listen_after_bind();
  listening_.store(false);
}

void HttpListener::stop() {
  if (http_ == nullptr) return;
  bool wait_for_accept_loop = false;
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_requested_ = true;
    wait_for_accept_loop = listening_.load();
  }
  // listen() has begun: httplib marks itself running before its accept loop, and only then
  // does its stop() close the socket. The wait is the few instructions between the two.
  while (wait_for_accept_loop && listening_.load() && !http_->is_running()) std::this_thread::yield();
  http_->stop();
}

}  // namespace pagoda::http
