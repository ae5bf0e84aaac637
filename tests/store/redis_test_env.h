// Redis servers for the store tests: redis-server children on free loopback ports (one server,
// or a 3-master Redis Cluster made with `redis-cli --cluster create`), killed with the test.
//
// Readiness is read from the server's own log ("Ready to accept connections" on its stdout, a
// pipe), not guessed with sleeps; a drain thread keeps reading it so the server never blocks
// on a full pipe. A port another test took in the meantime makes redis-server exit before it
// is ready: start() then tries another port. PR_SET_PDEATHSIG kills a server whose test died.
// redis-cli runs through tests/shell.h (planting records, resharding, CLUSTER INFO).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proc_stop.h"
#include "shell.h"

namespace pagoda::testing {

// A TCP port nobody listens on now (bound to 0 and released); `and_plus` also checks port+N
// (the cluster bus port is port + 10000).
inline int free_loopback_port(int and_plus = 0) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(fd);
      continue;
    }
    close(fd);
    const int port = ntohs(a.sin_port);
    if (and_plus == 0) return port;
    if (port + and_plus > 65535) continue;
    int fd2 = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons(static_cast<uint16_t>(port + and_plus));
    const bool ok = bind(fd2, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd2);
    if (ok) return port;
  }
  return -1;
}

class RedisServer {
 public:
  // nullptr when redis-server could not be started (the test fails on it).
  static std::unique_ptr<RedisServer> start(std::vector<std::string> extra_args = {}, bool cluster = false) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      const int port = free_loopback_port(cluster ? 10000 : 0);
      std::unique_ptr<RedisServer> s(new RedisServer(port, std::move(extra_args), cluster));
      if (s->launch()) return s;
      extra_args = std::move(s->extra_args_);
    }
    return nullptr;
  }

  ~RedisServer() {
    kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url() const { return "redis://" + address(); }
  bool running() const { return pid_ > 0; }

  // SIGKILL now (a crash, not a shutdown), and reap it.
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();
  }
  // SIGSTOP / SIGCONT: a server that still accepts (the kernel's backlog) but never answers.
  // freeze() returns once every thread is stopped (tests/proc_stop.h); false if it never was.
  bool freeze() { return stop_process(pid_); }
  void thaw() { ::kill(pid_, SIGCONT); }
  // Same port, same arguments, empty data (no persistence). False if it did not come up.
  bool restart() {
    kill();
    return launch();
  }

  // redis-cli against this server: `args` is shell text ("SET k v", "-x SET k < file").
  ShellRun cli(const std::string& args) const {
    return run_shell("redis-cli -h 127.0.0.1 -p " + std::to_string(port_) + " " + args + " 2>&1");
  }
  const std::string& dir() const { return dir_; }

 private:
  RedisServer(int port, std::vector<std::string> extra_args, bool cluster)
      : port_(port), extra_args_(std::move(extra_args)), cluster_(cluster) {
    char tmpl[] = "/tmp/pagoda-redis-XXXXXX";
    dir_ = mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
  }

  bool launch() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--dir", dir_, "--protected-mode", "no",
                                     "--daemonize", "no", "--loglevel", "notice"};
    if (cluster_) {  // nodes.conf in dir_ survives restart(): the node keeps its id and slots
      for (const char* a : {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}) {
        args.emplace_back(a);
      }
    }
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close_range(3, ~0U, 0);  // no inherited descriptor (`heavy`'s lock file) outlives the test
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    close(fds[1]);
    pid_ = pid;
    ready_ = false;
    ended_ = false;
    drain_ = std::thread([this, fd = fds[0]] { drain(fd); });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(20), [&] { return ready_ || ended_; });  // safety net only
    if (ready_) return true;
    lock.unlock();
    kill();
    return false;
  }

  // Reads the server's log until it closes; marks "ready" at its line.
  void drain(int fd) {
    std::string pending;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      if (!ready_) {
        pending.append(buf, static_cast<size_t>(n));
        if (pending.find("Ready to accept connections") != std::string::npos) {
          std::lock_guard<std::mutex> lock(mu_);
          ready_ = true;
          cv_.notify_all();
          pending.clear();
        }
      }
    }
    close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  int port_;
  std::vector<std::string> extra_args_;
  bool cluster_;
  std::string dir_;
  pid_t pid_ = -1;
  std::thread drain_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false, ended_ = false;
};

// Three masters, all 16384 slots assigned (redis-cli --cluster create), cluster_state:ok on all.
class RedisCluster {
 public:
  static std::unique_ptr<RedisCluster> start() {
    std::unique_ptr<RedisCluster> c(new RedisCluster);
    std::string hosts;
    for (int i = 0; i < 3; ++i) {
      auto s = RedisServer::start({}, /*cluster=*/true);
      if (s == nullptr) return nullptr;
      hosts += " " + s->address();
      c->nodes.push_back(std::move(s));
    }
    const ShellRun made = run_shell("redis-cli --cluster create" + hosts + " --cluster-replicas 0 --cluster-yes 2>&1");
    if (made.exit_code != 0) return nullptr;
    if (!c->wait_state_ok()) return nullptr;
    return c;
  }

  std::string url() const { return "redis+cluster://" + nodes[0]->address(); }
  // Polls CLUSTER INFO until every node says cluster_state:ok (joining takes about a second;
  // the deadline is a safety net, the loop ends as soon as the cluster is up).
  bool wait_state_ok() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (const auto& n : nodes) all = all && n->cli("CLUSTER INFO").out.find("cluster_state:ok") != std::string::npos;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The node id (CLUSTER MYID) and the node serving `slot` (index into nodes).
  std::string node_id(size_t i) const {
    std::string id = nodes[i]->cli("CLUSTER MYID").out;
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
    return id;
  }
  // Index of the node that serves `slot`, from CLUSTER NODES (-1 if none).
  int owner_of(int slot) const {
    std::istringstream lines(nodes[0]->cli("CLUSTER NODES").out);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::vector<std::string> f;
      for (std::string w; fields >> w;) f.push_back(w);
      if (f.size() < 9) continue;
      for (size_t k = 8; k < f.size(); ++k) {
        if (f[k].front() == '[') continue;  // a migrating/importing marker
        const size_t dash = f[k].find('-');
        const int lo = std::stoi(f[k].substr(0, dash));
        const int hi = dash == std::string::npos ? lo : std::stoi(f[k].substr(dash + 1));
        if (slot < lo || slot > hi) continue;
        const std::string addr = f[1].substr(0, f[1].find('@'));
        for (size_t i = 0; i < nodes.size(); ++i) {
          if (nodes[i]->address() == addr) return static_cast<int>(i);
        }
      }
    }
    return -1;
  }

  std::vector<std::unique_ptr<RedisServer>> nodes;
};

}  // namespace pagoda::testing
