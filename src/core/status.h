// Status and Result<T>: errors as values at module boundaries (DESIGN.md rule 4).
//
// A Status is either ok or carries a message a user can act on ("file.gguf: tensor
// 'blk.0.attn_q.weight' data ends at byte 9000, past the end of the file (8192 bytes)").
// Result<T> holds either a T or a non-ok Status. Both are cheap to move and [[nodiscard]].
// Bugs (broken invariants) are not Statuses: they abort through CHECK (core/check.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace pagoda {

// What kind of failure, for boundaries that must answer differently (HTTP status codes).
enum class StatusCode {
  kOk,
  kError,             // anything else (bad file, internal failure)
  kInvalidArgument,   // the caller's input is wrong (HTTP 400)
  kNotFound,          // no such model / route / request (HTTP 404)
  kTooLarge,          // longer than the context or larger than the KV pool (HTTP 413)
  kUnavailable,       // overloaded or shutting down: retry later (HTTP 429/503)
  kAborted,           // cancelled by the caller
  kResourceExhausted, // a configured bound is full (e.g. the pinned share of the KV pool; HTTP 507)
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(StatusCode::kError, std::move(message)); }
  static Status error(StatusCode code, std::string message) { return Status(code, std::move(message)); }
  static Status invalid_argument(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }
  static Status not_found(std::string message) { return Status(StatusCode::kNotFound, std::move(message)); }
  static Status too_large(std::string message) { return Status(StatusCode::kTooLarge, std::move(message)); }
  static Status unavailable(std::string message) { return Status(StatusCode::kUnavailable, std::move(message)); }
  static Status aborted(std::string message) { return Status(StatusCode::kAborted, std::move(message)); }
  static Status resource_exhausted(std::string message) {
    return Status(StatusCode::kResourceExhausted, std::move(message));
  }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context ("model.gguf: " + message); keeps the code.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(StatusCode code, std::string message) : message_(std::move(message)), code_(code) {
    if (code_ == StatusCode::kOk) code_ = StatusCode::kError;  // an error is never ok
  }
  std::string message_;
  StatusCode code_ = StatusCode::kOk;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {  // NOLINT
    CHECK(!std::get<Status>(value_).is_ok()) << "Result constructed from an ok Status";
  }

  bool is_ok() const { return std::holds_alternative<T>(value_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(value_);
  }
  T& value() & {
    CHECK(is_ok()) << "value() on an error Result: " << std::get<Status>(value_).message();
    return std::get<T>(value_);
  }
  const T& value() const& {
    CHECK(is_ok()) << "value() on an error Result: " << std::get<Status>(value_).message();
    return std::get<T>(value_);
  }
  T&& value() && {
    CHECK(is_ok()) << "value() on an error Result: " << std::get<Status>(value_).message();
    return std::get<T>(std::move(value_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace pagoda

// Returns early from a function returning Status or Result<T> when `expr` fails.
#define PAGODA_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::pagoda::Status pagoda_status_ = (expr);     \
    if (!pagoda_status_.is_ok()) return pagoda_status_; \
  } while (0)

#define PAGODA_CONCAT_INNER(a, b) a##b
#define PAGODA_CONCAT(a, b) PAGODA_CONCAT_INNER(a, b)
// `PAGODA_ASSIGN_OR_RETURN(auto x, load())` binds the value or returns the error.
#define PAGODA_ASSIGN_OR_RETURN(decl, expr)                                   \
  auto PAGODA_CONCAT(pagoda_result_, __LINE__) = (expr);                      \
  if (!PAGODA_CONCAT(pagoda_result_, __LINE__).is_ok())                       \
    return PAGODA_CONCAT(pagoda_result_, __LINE__).status();                  \
  decl = std::move(PAGODA_CONCAT(pagoda_result_, __LINE__)).value()
