// A TCP server that accepts connections and never answers (the kernel completes the handshake
// from the listen backlog; nothing ever reads or writes): the test for every timeout.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pagoda::testing {

class SilentServer {
 public:
  SilentServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(fd_, 16) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
  }
  ~SilentServer() { close(fd_); }
  int port() const { return port_; }  // -1 if it could not listen

 private:
  int fd_ = -1;
  int port_ = -1;
};

}  // namespace pagoda::testing
