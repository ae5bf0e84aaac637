// ConnectionProbe finds a connection's socket by its address pair and sees the peer hang up.
#include "server/http/connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pagoda::http {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  EXPECT_EQ(rc, 0);
  return ntohs(a.sin_port);
}

struct Pair {
  int listener = -1, client = -1, server = -1;
  Pair() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    a.sin_port = htons(static_cast<uint16_t>(port_of(listener, false)));
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server = accept(listener, nullptr, nullptr);
  }
  ~Pair() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
  ConnectionProbe probe() const {
    return ConnectionProbe("127.0.0.1", port_of(server, true), "127.0.0.1", port_of(server, false));
  }
};

TEST(ConnectionProbe, SeesAnOpenConnectionAndItsClose) {
  Pair p;
  const ConnectionProbe probe = p.probe();
  ASSERT_TRUE(probe.found());
  EXPECT_TRUE(probe.alive());
  ASSERT_EQ(write(p.client, "x", 1), 1);  // bytes to read are not a hang-up
  EXPECT_TRUE(probe.alive());
  close(p.client);
  p.client = -1;
  EXPECT_FALSE(probe.alive());
}

TEST(ConnectionProbe, AnUnknownPairIsNotFoundAndNeverClaimsAHangUp) {
  Pair p;
  const ConnectionProbe probe("127.0.0.1", 1, "127.0.0.1", 2);
  EXPECT_FALSE(probe.found());
  EXPECT_TRUE(probe.alive());
}

}  // namespace
}  // namespace pagoda::http
