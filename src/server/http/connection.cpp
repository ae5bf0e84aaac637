#include "server/http/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace pagoda::http {

namespace {

struct Endpoint {
  std::string addr;
  int port = -1;
};

bool endpoint_of(const sockaddr_storage& ss, Endpoint& out) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf)) == nullptr) return false;
    out = {buf, ntohs(a->sin_port)};
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf)) == nullptr) return false;
    out = {buf, ntohs(a->sin6_port)};
    return true;
  }
  return false;
}

bool matches(int fd, const Endpoint& remote, const Endpoint& local) {
  sockaddr_storage peer{}, self{};
  socklen_t peer_len = sizeof(peer), self_len = sizeof(self);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) return false;
  Endpoint p, s;
  if (!endpoint_of(peer, p) || !endpoint_of(self, s)) return false;
  return p.port == remote.port && s.port == local.port && p.addr == remote.addr && s.addr == local.addr;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const std::string& remote_addr, int remote_port, const std::string& local_addr,
                                 int local_port) {
  const Endpoint remote{remote_addr, remote_port}, local{local_addr, local_port};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char* end = nullptr;
    const std::string name = entry.path().filename().string();
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0') continue;
    if (matches(static_cast<int>(fd), remote, local)) {
      fd_ = static_cast<int>(fd);
      return;
    }
  }
}

bool ConnectionProbe::alive() const {
  if (fd_ < 0) return true;
  // TCP's own state says whether the peer closed (FIN: CLOSE_WAIT) or reset (CLOSE), even when
  // bytes it sent before are still unread.
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) {
    return info.tcpi_state != TCP_CLOSE_WAIT && info.tcpi_state != TCP_CLOSE && info.tcpi_state != TCP_LAST_ACK;
  }
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return true;  // nothing to read: the peer is silent, not gone
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return false;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return false;                                                     // orderly close (FIN)
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;  // RST: gone
  return true;
}

}  // namespace pagoda::http
