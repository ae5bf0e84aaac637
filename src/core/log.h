// Logging sink: one place where diagnostics go (stderr by default), with a level.
// A Logger is passed down explicitly; nothing below tools/ decides where text goes.
#pragma once

#include <cstdio>
#include <string>

namespace pagoda {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kSilent = 4 };

class Logger {
 public:
  explicit Logger(LogLevel level = LogLevel::kInfo, FILE* sink = stderr) : level_(level), sink_(sink) {}
  void set_level(LogLevel level) { level_ = level; }
  LogLevel level() const { return level_; }
  void log(LogLevel level, const std::string& message) const;
  void info(const std::string& message) const { log(LogLevel::kInfo, message); }
  void warn(const std::string& message) const { log(LogLevel::kWarn, message); }
  void error(const std::string& message) const { log(LogLevel::kError, message); }
  void debug(const std::string& message) const { log(LogLevel::kDebug, message); }

 private:
  LogLevel level_;
  FILE* sink_;
};

}  // namespace pagoda
