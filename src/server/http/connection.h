// ConnectionProbe: does the client of an HTTP request still hold its connection?
//
// cpp-httplib 0.11 gives handlers no socket and notices a closed peer only when a write fails,
// so a request whose client has gone would run to its end. The probe finds the handler's own
// socket by its address pair (local and remote address and port, unique per TCP connection)
// among the process's descriptors, once, and then asks the kernel: a TCP state of CLOSE_WAIT
// (the peer's FIN arrived) or CLOSE (reset) means the client closed it. The socket stays open while the
// handler runs (httplib closes it after the handler returns), so the descriptor cannot be
// reused under the probe.
#pragma once

#include <string>

namespace pagoda::http {

class ConnectionProbe {
 public:
  ConnectionProbe(const std::string& remote_addr, int remote_port, const std::string& local_addr, int local_port);
  // False once the peer has closed or reset the connection. True when the socket was not found
  // (the probe then never claims a disconnect; a failed write still reveals it).
  bool alive() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace pagoda::http
