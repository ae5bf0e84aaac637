#include "core/log.h"

namespace pagoda {

void Logger::log(LogLevel level, const std::string& message) const {
  if (level < level_ || sink_ == nullptr) return;
  static constexpr const char* kTags[] = {"debug", "info", "warn", "error"};
  std::fprintf(sink_, "[pagoda %s] %s\n", kTags[static_cast<int>(level)], message.c_str());
}

}  // namespace pagoda
