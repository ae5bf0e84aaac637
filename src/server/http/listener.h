// HttpListener: one cpp-httplib server set up the way every Pagoda HTTP front needs it
// (`pagoda serve`'s HttpServer, `pagoda router`): a thread pool of `threads` connections, a
// body limit, keep-alive, a listen backlog that holds a burst of clients, and OpenAI error
// objects for httplib's own answers (unknown route 404, body too large 413, malformed 400) and
// for an exception escaping a handler (500, logged).
//
// Life: construct -> register routes on server() -> bind() -> listen() (blocks) ... stop()
// (from any thread; listen() returns once the in-flight handlers have).
#pragma once

#include <cstddef>
#include <memory>
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
  int threads = 64;                // connections served at once
  size_t max_body_bytes = 8u << 20;
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
  // Serves until stop(). Precondition: bind() succeeded.
  void listen();
  void stop();

  static constexpr int kListenBacklog = 1024;  // pending connections (httplib's own: 5)

 private:
  ListenerConfig config_;
  const Logger& logger_;
  std::unique_ptr<httplib::Server> http_;
  int listen_socket_ = -1;  // the bound socket, once bind() ran
};

}  // namespace pagoda::http
