// CHECK: broken invariants abort with file:line and a message (DESIGN.md rule 4).
//   CHECK(ref_count_[id] > 0) << "block " << id << " freed twice";
// Always on, also in Release: a KV cache that silently corrupts is worse than a crash.
#pragma once

#include <sstream>

namespace pagoda::detail {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* expr);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `CHECK(x) << ...` be one expression of type void.
struct CheckVoidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace pagoda::detail

#define CHECK(cond)                                   \
  (__builtin_expect(!!(cond), 1))                     \
      ? (void)0                                       \
      : ::pagoda::detail::CheckVoidify() &            \
            ::pagoda::detail::CheckFailure(__FILE__, __LINE__, #cond)

#define CHECK_EQ(a, b) CHECK((a) == (b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_LT(a, b) CHECK((a) < (b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_LE(a, b) CHECK((a) <= (b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_GE(a, b) CHECK((a) >= (b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_GT(a, b) CHECK((a) > (b)) << "(" << (a) << " vs " << (b) << ") "
