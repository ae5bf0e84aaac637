// Runs the built `pagoda` binary as a user would and captures what it prints.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "shell.h"
#include "test_data.h"

namespace pagoda::testing {

struct Output {
  int exit_code = -1;
  bool signaled = false;  // killed by a signal (a crash)
  std::string out;        // stdout
  std::string err;        // stderr
};

// A per-process scratch folder.
inline std::string temp_dir() {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("pagoda-cli-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

// `args` is appended to the binary's path and run through the shell.
inline Output pagoda(const std::string& args) {
  const std::string err_path = temp_dir() + "/stderr.txt";
  const std::string cmd = std::string(PAGODA_BIN_DIR) + "/pagoda " + args + " 2>" + err_path;
  const ShellRun run = run_shell(cmd);
  Output o;
  o.exit_code = run.exit_code;
  o.signaled = run.signaled;
  o.out = run.out;
  o.err = read_file_or_empty(err_path);
  return o;
}

}  // namespace pagoda::testing
