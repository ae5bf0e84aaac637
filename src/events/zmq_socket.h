// Thin RAII over libzmq's C API (one owner per context and socket; errors as Status values).
// A ZeroMQ socket is used by one thread at a time; a context may be shared.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::events {

class ZmqContext {
 public:
  ZmqContext();
  ~ZmqContext();
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;
  void* get() const { return ctx_; }
  // Makes every blocking call on its sockets return (ETERM); sockets must still be closed.
  void shutdown();

 private:
  void* ctx_ = nullptr;
};

class ZmqSocket {
 public:
  ZmqSocket() = default;
  ZmqSocket(ZmqContext& ctx, int type);  // ZMQ_PUB, ZMQ_SUB, ZMQ_ROUTER, ZMQ_DEALER
  ~ZmqSocket() { close(); }
  ZmqSocket(ZmqSocket&& other) noexcept : socket_(other.socket_) { other.socket_ = nullptr; }
  ZmqSocket& operator=(ZmqSocket&& other) noexcept;
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;

  bool valid() const { return socket_ != nullptr; }
  void* get() const { return socket_; }
  void close();  // linger 0: unsent messages are dropped

  Status set_int(int option, int value);
  Status set_bytes(int option, std::string_view value);
  Status bind(const std::string& endpoint);
  Status connect(const std::string& endpoint);
  // The address it bound to (a wildcard port resolved), from ZMQ_LAST_ENDPOINT.
  std::string last_endpoint() const;

  // Sends the frames as one message without blocking; false when it would block (PUB beyond
  // its high-water mark drops instead) or failed.
  bool send(const std::vector<std::string_view>& frames);
  // Receives one whole message into frames; false when none is waiting (non-blocking) or the
  // context was shut down. A message of more than max_frames frames is drained and rejected.
  bool receive(std::vector<std::string>& frames, bool block, size_t max_frames = 16);

 private:
  void* socket_ = nullptr;
};

std::string zmq_error_text();  // zmq_strerror(zmq_errno())

// 8-byte big-endian sequence numbers, as every message's second frame carries them.
std::string encode_seq(int64_t seq);
// false unless exactly 8 bytes.
bool decode_seq(std::string_view bytes, int64_t& seq);

}  // namespace pagoda::events
