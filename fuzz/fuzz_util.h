// Helpers shared by the libFuzzer harnesses (fuzz/*_fuzz.cpp; see FUZZING.md).
//
// A harness is one translation unit defining LLVMFuzzerTestOneInput; a property it checks that
// fails calls fuzz_fail(), which aborts, so libFuzzer records the input as a crash. Inputs made of
// several parts (a model file and its tokenizer, tokenizer.json and tokenizer_config.json) are
// the parts joined by kPartSeparator, so seed files stay plain, editable files.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::fuzz {

inline constexpr std::string_view kPartSeparator = "\n--pagoda-fuzz-part--\n";

[[noreturn]] inline void fuzz_fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

// The input split at each kPartSeparator (at most max_parts parts; the last one keeps the rest).
inline std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t max_parts) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = in.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(in);
  return parts;
}

// A folder of this process (under TMPDIR or /tmp) for harnesses whose target reads files;
// removed when the process exits normally.
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder runs after static destructors.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/pagoda_fuzz_" +
                              std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return d;
  }();
  return *dir;
}

// Replaces `path` with exactly `bytes` (a failure here is the harness's, not the target's).
inline void write_file(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fuzz_fail("harness: cannot create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) fuzz_fail("harness: cannot write", path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

inline void remove_file(const std::string& path) { ::unlink(path.c_str()); }

// Whether `s` is well-formed UTF-8 (no surrogates, no overlong forms, at most U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace pagoda::fuzz
