#include "store/redis_connection.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace pagoda::store {
namespace {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

timeval to_timeval(int64_t ns) {
  if (ns < 1'000'000) ns = 1'000'000;  // at least 1 ms: 0 would mean "no timeout" to the kernel
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  tv.tv_usec = static_cast<suseconds_t>((ns % 1'000'000'000) / 1000);
  return tv;
}

// After an EPIPE the kernel left a SIGPIPE pending on this thread (blocked here): take it.
void consume_pending_sigpipe() {
  sigset_t pending;
  if (sigpending(&pending) != 0 || sigismember(&pending, SIGPIPE) != 1) return;
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, SIGPIPE);
  const timespec zero{0, 0};
  while (sigtimedwait(&only, nullptr, &zero) == SIGPIPE) {
  }
}

}  // namespace

void RedisReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

void block_sigpipe_in_this_thread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Result<RedisConnection> RedisConnection::connect(const RedisEndpoint& endpoint, const RedisTimeouts& timeouts) {
  redisContext* ctx = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, to_timeval(timeouts.connect_ms * 1'000'000));
  if (ctx == nullptr) return Status::unavailable("redis " + endpoint.address() + ": out of memory creating a connection");
  if (ctx->err != 0) {
    std::string why = ctx->errstr;
    if (ctx->err == REDIS_ERR_IO && (errno == EINPROGRESS || errno == ETIMEDOUT || why.find("timed out") != std::string::npos)) {
      why = "connect timed out after " + std::to_string(timeouts.connect_ms) + " ms";
    }
    redisFree(ctx);
    return Status::unavailable("redis " + endpoint.address() + ": " + why);
  }
  RedisConnection conn(ctx, endpoint, timeouts);
  const std::string db = std::to_string(endpoint.db);
  if (!endpoint.password.empty()) {
    RedisArgv auth;
    auth.add("AUTH").add(endpoint.password);
    PAGODA_ASSIGN_OR_RETURN(RedisReplyPtr reply, conn.command(auth));
    if (reply_is_error(reply.get())) return Status::unavailable("redis " + endpoint.address() + ": AUTH: " + reply_text(reply.get()));
  }
  if (endpoint.db != 0) {
    RedisArgv select;
    select.add("SELECT").add(db);
    PAGODA_ASSIGN_OR_RETURN(RedisReplyPtr reply, conn.command(select));
    if (reply_is_error(reply.get())) return Status::unavailable("redis " + endpoint.address() + ": SELECT " + db + ": " + reply_text(reply.get()));
  }
  return conn;
}

RedisConnection::RedisConnection(redisContext* ctx, RedisEndpoint endpoint, RedisTimeouts timeouts)
    : ctx_(ctx), endpoint_(std::move(endpoint)), timeouts_(timeouts) {}

RedisConnection::RedisConnection(RedisConnection&& other) noexcept
    : ctx_(other.ctx_), endpoint_(std::move(other.endpoint_)), timeouts_(other.timeouts_),
      deadline_ns_(other.deadline_ns_), broken_reason_(std::move(other.broken_reason_)) {
  other.ctx_ = nullptr;
}

RedisConnection& RedisConnection::operator=(RedisConnection&& other) noexcept {
  if (this != &other) {
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = other.ctx_;
    other.ctx_ = nullptr;
    endpoint_ = std::move(other.endpoint_);
    timeouts_ = other.timeouts_;
    deadline_ns_ = other.deadline_ns_;
    broken_reason_ = std::move(other.broken_reason_);
  }
  return *this;
}

RedisConnection::~RedisConnection() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

void RedisConnection::begin_call() { deadline_ns_ = steady_now_ns() + timeouts_.io_ms * 1'000'000; }

bool RedisConnection::arm_deadline() {
  const int64_t left = deadline_ns_ - steady_now_ns();
  if (left <= 0) return false;
  return redisSetTimeout(ctx_, to_timeval(left)) == REDIS_OK;
}

Status RedisConnection::fault(const char* what) {
  const int saved_errno = errno;
  std::string why;
  if (ctx_->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
    why = "timed out after " + std::to_string(timeouts_.io_ms) + " ms";
  } else if (ctx_->err == REDIS_ERR_EOF) {
    why = "the server closed the connection";
  } else {
    why = ctx_->err != 0 ? ctx_->errstr : std::strerror(saved_errno);
  }
  if (saved_errno == EPIPE || ctx_->err == REDIS_ERR_IO) consume_pending_sigpipe();
  broken_reason_ = "redis " + endpoint_.address() + ": " + what + ": " + why;
  return Status::unavailable(broken_reason_);
}

Status RedisConnection::timed_out(const char* what) {
  broken_reason_ = "redis " + endpoint_.address() + ": " + what + ": timed out after " + std::to_string(timeouts_.io_ms) + " ms";
  return Status::unavailable(broken_reason_);
}

void RedisConnection::append(const RedisArgv& args) {
  if (broken()) return;
  if (redisAppendCommandArgv(ctx_, args.argc, const_cast<const char**>(args.argv.data()), args.len.data()) != REDIS_OK) {
    (void)fault("queueing a command");
  }
}

Status RedisConnection::flush() {
  if (broken()) return Status::unavailable(broken_reason_);
  int done = 0;
  while (done == 0) {
    if (!arm_deadline()) return timed_out("sending");
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return fault("sending");
  }
  return Status::ok();
}

Result<RedisReplyPtr> RedisConnection::read_reply() {
  if (broken()) return Status::unavailable(broken_reason_);
  PAGODA_RETURN_IF_ERROR(flush());
  void* reply = nullptr;
  // A reply already parsed from the input buffer needs no read (and no deadline).
  if (redisGetReplyFromReader(ctx_, &reply) != REDIS_OK) return fault("reading");
  // One socket timeout per reply (what is left of the call), and the deadline checked between
  // reads (hiredis reads 16 KiB at a time): a trickling server is cut off too.
  if (reply == nullptr && !arm_deadline()) return timed_out("reading");
  while (reply == nullptr) {
    if (redisBufferRead(ctx_) != REDIS_OK) return fault("reading");
    if (redisGetReplyFromReader(ctx_, &reply) != REDIS_OK) return fault("reading");
    if (reply == nullptr && steady_now_ns() > deadline_ns_) return timed_out("reading");
  }
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

Result<RedisReplyPtr> RedisConnection::command(const RedisArgv& args) {
  begin_call();
  append(args);
  return read_reply();
}

bool reply_is_error(const redisReply* reply) { return reply != nullptr && reply->type == REDIS_REPLY_ERROR; }

std::string reply_text(const redisReply* reply) {
  if (reply == nullptr) return {};
  if (reply->type == REDIS_REPLY_STATUS || reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STRING) {
    return std::string(reply->str, reply->len);
  }
  return {};
}

}  // namespace pagoda::store
