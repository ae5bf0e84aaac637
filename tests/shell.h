// Runs a shell command from a test and captures its standard output (every test that drives a
// program — the pagoda CLI, node reference scripts, promtool, curl — goes through here).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace pagoda::testing {

struct ShellRun {
  int exit_code = -1;     // -1: could not start, or killed by a signal
  bool signaled = false;  // killed by a signal (a crash)
  std::string out;        // stdout (add 2>&1 to the command for stderr too)
};

inline ShellRun run_shell(const std::string& cmd) {
  ShellRun run;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) run.out.append(buf, n);
  const int status = pclose(p);
  run.signaled = WIFSIGNALED(status);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace pagoda::testing
