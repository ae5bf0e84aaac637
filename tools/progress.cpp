#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "kvcache/kv_layout.h"

namespace pagoda::tools {

std::string render_progress(const std::string& label, int64_t done, int64_t total, int width, bool bytes) {
  const double fraction = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(fraction * width + 1e-9);
  std::string line = label + "  [" + std::string(static_cast<size_t>(filled), '#') +
                     std::string(static_cast<size_t>(width - filled), '.') + "]";
  char pct[16];
  std::snprintf(pct, sizeof(pct), " %3d%%  ", static_cast<int>(fraction * 100 + 1e-9));
  line += pct;
  if (bytes) {
    line += kvcache::format_bytes(done) + " / " + kvcache::format_bytes(total);
  } else {
    line += std::to_string(done) + " / " + std::to_string(total);
  }
  return line;
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, bool enabled, bool bytes)
    : label_(std::move(label)), enabled_(enabled && stderr_is_terminal()), bytes_(bytes) {}

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  const int permille = total > 0 ? static_cast<int>(std::min<int64_t>(1000, done * 1000 / std::max<int64_t>(1, total))) : 0;
  if (permille / 10 == last_permille_ / 10 && permille != 1000) return;  // redraw per 1%
  last_permille_ = permille;
  std::fprintf(stderr, "\r%s\x1b[K", render_progress(label_, done, total, 30, bytes_).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace pagoda::tools
