// ProgressBar: long work (loading, converting, make-model, bench) shown on a terminal as
//   loading  [##########..........]  50%  1.2 GiB / 2.5 GiB
// redrawn in place on stderr at most every 1% (and at the end), erased by finish(). It draws
// nothing when stderr is not a terminal (logs, pipes, CI) or with --quiet.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda::tools {

// One line of the bar (no carriage return): label, bar of `width` cells, percent, sizes in
// human units ("KiB", "MiB", "GiB") or plain counts when `bytes` is false.
std::string render_progress(const std::string& label, int64_t done, int64_t total, int width, bool bytes);

bool stderr_is_terminal();

class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled, bool bytes = true);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  void update(int64_t done, int64_t total);
  void finish();  // erases the line; idempotent
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  bool enabled_;
  bool bytes_;
  bool drawn_ = false;
  int last_permille_ = -1;
};

}  // namespace pagoda::tools
