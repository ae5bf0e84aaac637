#include "events/zmq_socket.h"

#include <zmq.h>

#include "core/check.h"

namespace pagoda::events {

std::string zmq_error_text() { return zmq_strerror(zmq_errno()); }

ZmqContext::ZmqContext() : ctx_(zmq_ctx_new()) { CHECK(ctx_ != nullptr) << "zmq_ctx_new: " << zmq_error_text(); }

ZmqContext::~ZmqContext() {
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

void ZmqContext::shutdown() { zmq_ctx_shutdown(ctx_); }

ZmqSocket::ZmqSocket(ZmqContext& ctx, int type) : socket_(zmq_socket(ctx.get(), type)) {
  CHECK(socket_ != nullptr) << "zmq_socket: " << zmq_error_text();
  const int linger = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
}

ZmqSocket& ZmqSocket::operator=(ZmqSocket&& other) noexcept {
  if (this != &other) {
    close();
    socket_ = other.socket_;
    other.socket_ = nullptr;
  }
  return *this;
}

void ZmqSocket::close() {
  if (socket_ != nullptr) zmq_close(socket_);
  socket_ = nullptr;
}

Status ZmqSocket::set_int(int option, int value) {
  if (zmq_setsockopt(socket_, option, &value, sizeof(value)) != 0) {
    return Status::error("zmq_setsockopt(" + std::to_string(option) + "): " + zmq_error_text());
  }
  return Status::ok();
}

Status ZmqSocket::set_bytes(int option, std::string_view value) {
  if (zmq_setsockopt(socket_, option, value.data(), value.size()) != 0) {
    return Status::error("zmq_setsockopt(" + std::to_string(option) + "): " + zmq_error_text());
  }
  return Status::ok();
}

Status ZmqSocket::bind(const std::string& endpoint) {
  if (zmq_bind(socket_, endpoint.c_str()) != 0) return Status::error("cannot bind " + endpoint + ": " + zmq_error_text());
  return Status::ok();
}

Status ZmqSocket::connect(const std::string& endpoint) {
  if (zmq_connect(socket_, endpoint.c_str()) != 0) {
    return Status::error("cannot connect to " + endpoint + ": " + zmq_error_text());
  }
  return Status::ok();
}

std::string ZmqSocket::last_endpoint() const {
  char buf[512] = {};
  size_t size = sizeof(buf);
  if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, buf, &size) != 0) return {};
  return std::string(buf);
}

bool ZmqSocket::send(const std::vector<std::string_view>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(socket_, frames[i].data(), frames[i].size(), flags) < 0) return false;
  }
  return true;
}

bool ZmqSocket::receive(std::vector<std::string>& frames, bool block, size_t max_frames) {
  frames.clear();
  bool too_many = false;
  while (true) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    const int flags = block || !frames.empty() ? 0 : ZMQ_DONTWAIT;  // the rest of a message is there at once
    if (zmq_msg_recv(&msg, socket_, flags) < 0) {
      zmq_msg_close(&msg);
      frames.clear();
      return false;
    }
    if (frames.size() < max_frames) {
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    } else {
      too_many = true;
    }
    const bool more = zmq_msg_more(&msg) != 0;
    zmq_msg_close(&msg);
    if (!more) break;
  }
  if (too_many) frames.clear();
  return !too_many;
}

std::string encode_seq(int64_t seq) {
  std::string out(8, '\0');
  const uint64_t v = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  return out;
}

bool decode_seq(std::string_view bytes, int64_t& seq) {
  if (bytes.size() != 8) return false;
  uint64_t v = 0;
  for (char c : bytes) v = (v << 8) | static_cast<uint8_t>(c);
  seq = static_cast<int64_t>(v);
  return true;
}

}  // namespace pagoda::events
