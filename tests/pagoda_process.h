// A `pagoda` subcommand run as a child process (the serve CLI tests, the multi-process router
// tests): stdout is read line by line (serve and router print their URL first), stderr goes to
// a file.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/check.h"
#include "proc_stop.h"
#include "test_data.h"

namespace pagoda::testing {

class PagodaProcess {
 public:
  explicit PagodaProcess(const std::string& args) {
    static int counter = 0;
    err_path_ = "/tmp/pagoda-process-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".err";
    int out[2];
    CHECK(pipe(out) == 0);
    const pid_t parent = getpid();
    pid_ = fork();
    CHECK(pid_ >= 0);
    if (pid_ == 0) {
      // The child dies with its test (a test killed by a timeout leaves no server behind), and
      // keeps none of the test's other descriptors: an inherited one (`heavy`'s lock file, a
      // pipe) would outlive the test in an orphaned server.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(out[1], STDOUT_FILENO);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, STDERR_FILENO);
      close_range(3, ~0U, 0);
      const std::string cmd = "exec " + std::string(PAGODA_BIN_DIR) + "/pagoda " + args;
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    out_ = fdopen(out[0], "r");
  }
  ~PagodaProcess() {
    kill_now();
    if (out_ != nullptr) fclose(out_);
    std::remove(err_path_.c_str());
  }
  PagodaProcess(const PagodaProcess&) = delete;
  PagodaProcess& operator=(const PagodaProcess&) = delete;

  // The next stdout line ("" at the end of its output).
  std::string line() {
    char buf[4096];
    if (fgets(buf, sizeof(buf), out_) == nullptr) return "";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  // The port of the URL its first line names ("... at http://127.0.0.1:PORT"); -1 if none.
  int port() {
    const std::string first = line();
    const size_t colon = first.rfind(':');
    return colon == std::string::npos ? -1 : std::atoi(first.c_str() + colon + 1);
  }
  // Exit code after SIGTERM (-1: killed by a signal).
  int terminate() {
    if (reaped_) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void kill_now() {
    if (pid_ <= 0 || reaped_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }
  std::string err() const { return read_file_or_empty(err_path_); }
  // SIGSTOP / SIGCONT and the like, while it runs.
  void signal(int signal_number) {
    if (pid_ > 0 && !reaped_) kill(pid_, signal_number);
  }
  // SIGSTOP, returning once every thread is stopped (tests/proc_stop.h); false after timeout_s.
  bool stop(double timeout_s = 20) { return pid_ > 0 && !reaped_ && stop_process(pid_, timeout_s); }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  FILE* out_ = nullptr;
  std::string err_path_;
};

// A loopback port that was free a moment ago (for a process that must come back on it).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  CHECK(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace pagoda::testing
