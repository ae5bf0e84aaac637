// Stopping a child process for a test (SIGSTOP) and knowing it is stopped: kill() returns
// before the threads stop, and a thread running on another CPU can still answer a peer for a
// while (seen in PdTest: a third of the time the prefill worker's main thread was still running
// right after kill(), and in 2 runs of 60 it answered the decode worker's confirm).
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_data.h"

namespace pagoda::testing {

// Whether every thread of `pid` (/proc/PID/task/TID/stat) is in state 'T' (stopped).
inline bool all_threads_stopped(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool all = true, any = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string stat = read_file_or_empty(dir + "/" + e->d_name + "/stat");
    const size_t paren = stat.rfind(')');
    const char state = paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
    any = true;
    if (state != 'T' && state != 't') all = false;
  }
  closedir(d);
  return any && all;
}

// SIGSTOP, then waits until every thread is stopped; false if that took over timeout_s.
inline bool stop_process(pid_t pid, double timeout_s = 20) {
  if (kill(pid, SIGSTOP) != 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!all_threads_stopped(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace pagoda::testing
