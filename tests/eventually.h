// Waiting in tests for something another thread or process does: polls until done() holds. The
// timeout is a safety net (a failure), never a timing assertion.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace pagoda::testing {

inline bool eventually(const std::function<bool()>& done, double timeout_s = 20) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace pagoda::testing
