// Clock: time is an injected input (DESIGN.md rule 6). SteadyClock reads the monotonic
// clock; tests use ManualClock to make time-dependent logic deterministic.
#pragma once

#include <chrono>
#include <cstdint>

namespace pagoda {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t now_ns() const = 0;
  double now_seconds() const { return static_cast<double>(now_ns()) * 1e-9; }
};

class SteadyClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class ManualClock final : public Clock {
 public:
  int64_t now_ns() const override { return now_ns_; }
  void advance_ns(int64_t ns) { now_ns_ += ns; }

 private:
  int64_t now_ns_ = 0;
};

}  // namespace pagoda
