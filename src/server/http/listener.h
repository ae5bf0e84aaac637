// HttpListener: one cpp-httplib server set up the way every Pagoda HTTP front needs it
// (`pagoda serve`'s HttpServer, `pagoda router`): `threads` connections served at once (a
// ConnectionGate: beyond them a connection's requests get 503 "too many connections" and it is
// closed), read and idle timeouts (a client that sends nothing for read_timeout_s is dropped), a
// body limit, keep-alive, a listen backlog that holds a burst of clients, and OpenAI error
// objects for httplib's own answers (unknown route 404, body too large 413, malformed 400) and
// for an exception escaping a handler (500, logged).
//
// Life: construct -> register routes on server() -> bind() -> listen() (blocks) ... stop()
// (from any thread; listen() returns once the in-flight handlers have).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "core/log.h"
#include "core/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace pagoda::http {

struct ListenerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (bind() returns it)
  int threads = 64;                // connections served at once (the rest: 503)
  size_t max_body_bytes = 8u << 20;
  int read_timeout_s = 5;          // a request's bytes stop arriving for this long: dropped
  int idle_timeout_s = 5;          // an idle keep-alive connection is closed after this long
  int overflow_threads = 2;        // threads answering 503 to connections over the limit
};

class HttpListener {
 public:
  HttpListener(ListenerConfig config, const Logger& logger);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  httplib::Server& server() { return *http_; }
  // Binds host:port; returns the port (the chosen one when port is 0).
  Result<int> bind();
  // Serves until stop(). Precondition: bind() succeeded. Returns at once if stop() came first.
  void listen();
  // Ends listen() whenever it is called, even before listen() has started accepting (httplib's
  // own stop() does nothing until its accept loop runs, which left a listen() that began just
  // after an early stop() blocked in accept() for good).
  void stop();

  static constexpr int kListenBacklog = 1024;  // pending connections (httplib's own: 5)

 private:
  ListenerConfig config_;
  const Logger& logger_;
  std::unique_ptr<httplib::Server> http_;
  int listen_socket_ = -1;  // the bound socket, once bind() ran
  std::mutex stop_mutex_;            // orders listen()'s start against stop()
  bool stop_requested_ = false;      // guarded by stop_mutex_
  std::atomic<bool> listening_{false};  // inside listen_after_bind()
};

}  // namespace pagoda::http
