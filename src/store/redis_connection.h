// RedisConnection: one blocking hiredis connection to one server, with a deadline on every
// call, pipelining (append many commands, flush once, read the replies in order) and errors as
// values. Used only by the Redis tier's I/O thread (store/redis_tier.h), never by a caller's.
//
// States: connected ──I/O error or timeout──▶ broken (every later call fails at once; the
// owner drops it and connects anew). A server's error reply (-OOM, -MOVED) is a reply, not a
// fault: the connection stays usable.
//
// SIGPIPE: a write to a server that died raises SIGPIPE. The thread that uses connections
// blocks it (block_sigpipe_in_this_thread); a pending one is consumed after an EPIPE, so the
// process's own disposition is never touched.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "store/redis_url.h"

struct redisContext;  // hiredis
struct redisReply;

namespace pagoda::store {

struct RedisTimeouts {
  int64_t connect_ms = 500;  // TCP connect (+ AUTH/SELECT)
  int64_t io_ms = 1000;      // one call: a pipeline's flush + its replies
};

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// A command's arguments. The bytes are the caller's and must outlive the append() that takes
// them (hiredis copies them into its output buffer there).
struct RedisArgv {
  static constexpr int kMaxArgs = 8;
  std::array<const char*, kMaxArgs> argv{};
  std::array<size_t, kMaxArgs> len{};
  int argc = 0;

  RedisArgv& add(std::string_view arg) {
    CHECK_LT(argc, kMaxArgs) << "too many Redis arguments";
    argv[argc] = arg.data();
    len[argc] = arg.size();
    ++argc;
    return *this;
  }
};

void block_sigpipe_in_this_thread();

class RedisConnection {
 public:
  // Connects within timeouts.connect_ms, then AUTH and SELECT when the endpoint asks for them.
  static Result<RedisConnection> connect(const RedisEndpoint& endpoint, const RedisTimeouts& timeouts);

  RedisConnection(RedisConnection&&) noexcept;
  RedisConnection& operator=(RedisConnection&&) noexcept;
  ~RedisConnection();

  // Starts a call: every flush/read until the next begin_call must finish by
  // now + timeouts.io_ms (a server that stops answering is a timeout, never a hang).
  void begin_call();
  // Queues a command (sent by flush() or the first read_reply()).
  void append(const RedisArgv& args);
  Status flush();
  // The next reply, in order. An error here is a fault: the connection is broken.
  Result<RedisReplyPtr> read_reply();
  // begin_call + append + read_reply.
  Result<RedisReplyPtr> command(const RedisArgv& args);

  bool broken() const { return !broken_reason_.empty(); }
  const std::string& broken_reason() const { return broken_reason_; }
  const RedisEndpoint& endpoint() const { return endpoint_; }

 private:
  RedisConnection(redisContext* ctx, RedisEndpoint endpoint, RedisTimeouts timeouts);
  Status fault(const char* what);  // marks broken with hiredis's error, returns it
  Status timed_out(const char* what);
  bool arm_deadline();             // sets the socket timeout to what is left; false if none

  redisContext* ctx_ = nullptr;  // owned (redisFree)
  RedisEndpoint endpoint_;
  RedisTimeouts timeouts_;
  int64_t deadline_ns_ = 0;      // steady clock; the current call's end
  std::string broken_reason_;
};

// "OK" status replies, integers, strings: small helpers for replies the tier expects.
bool reply_is_error(const redisReply* reply);
std::string reply_text(const redisReply* reply);  // status/error/string text, "" otherwise

}  // namespace pagoda::store
