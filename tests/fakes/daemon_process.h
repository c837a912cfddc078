// DaemonProcess: a real ktuned started as a child process on a private socket and data directory,
// for end-to-end tests. Stops it with SIGTERM (then SIGKILL) when destroyed.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"

namespace ktune::testing {

// $KTUNED when the tests run from another machine's copy (the GPU machine), else the build tree.
inline std::string ktuned_path() {
  if (const char* p = std::getenv("KTUNED"); p && *p) return p;
  return std::string(KTUNE_BINARY_DIR) + "/daemon/ktuned";
}
inline std::string ktune_cli_path() {
  return std::string(KTUNE_BINARY_DIR) + "/client/cli/ktune";
}

class DaemonProcess {
 public:
  DaemonProcess(std::string socket, std::string data_dir, std::vector<std::string> extra = {})
      : m_socket(std::move(socket)), m_data_dir(std::move(data_dir)), m_extra(std::move(extra)) {}
  ~DaemonProcess() { stop(); }

  // Starts ktuned and waits until it answers a status request (10 s at most).
  bool start() {
    spawn();
    return wait_ready(std::chrono::seconds(10), std::chrono::milliseconds(50));
  }

  // Starts ktuned and returns at once (wait_ready waits for it).
  void spawn() {
    m_log = m_data_dir + ".log";
    m_exit_code = -1;
    m_pid = ::fork();
    if (m_pid == 0) {
      std::FILE* log = std::fopen(m_log.c_str(), "a");
      if (log) {
        ::dup2(::fileno(log), STDERR_FILENO);
        ::dup2(::fileno(log), STDOUT_FILENO);
      }
      std::vector<std::string> args = {ktuned_path(),
                                       "--socket",
                                       m_socket,
                                       "--data-dir",
                                       m_data_dir,
                                       "--set",
                                       "server.metrics=127.0.0.1:0",
                                       "--set",
                                       "store.seed_tables="};
      // No configuration file unless the test names one: a developer's
      // ~/.config/ktune/ktuned.yaml or /etc/ktune/ktuned.yaml must not change the tests.
      if (std::find(m_extra.begin(), m_extra.end(), "--config") == m_extra.end())
        args.insert(args.end(), {"--config", "/dev/null"});
      args.insert(args.end(), m_extra.begin(), m_extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      for (const auto& e : m_env) ::putenv(const_cast<char*>(e.c_str()));  // child only
      if (m_fd_limit > 0) {
        const rlimit limit{rlim_t(m_fd_limit), rlim_t(m_fd_limit)};
        ::setrlimit(RLIMIT_NOFILE, &limit);
      }
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
  }

  // Polls (every `poll`) until the spawned ktuned answers a status request; false when it
  // exited or `timeout` passed.
  bool wait_ready(std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
    ClientOptions o;
    o.socket_path = m_socket;
    o.timeout = std::chrono::milliseconds(500);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (reap(WNOHANG)) return false;
      Client c(o);
      if (auto s = c.status(); s && (*s)["pid"] == m_pid) return true;  // ours, not another daemon
      std::this_thread::sleep_for(poll);
    }
    return false;
  }

  // SIGTERM and wait; returns the exit status (or -1 if it had to be killed after 30 s: longer
  // than server.drain_timeout_ms, 10 s, and a lane's trial). One that already exited by itself
  // returns that exit's status; none running after crash(), 0.
  int stop() {
    if (m_pid <= 0) return m_exit_code == -1 ? 0 : m_exit_code;
    ::kill(m_pid, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      if (reap(WNOHANG)) return m_exit_code;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    crash();
    return -1;
  }

  // Whether the spawned ktuned is still alive; one that exited is reaped (wait_exit() then
  // returns its exit code).
  bool running() {
    reap(WNOHANG);
    return m_pid > 0;
  }

  // SIGKILL, as a crash would: the socket file stays behind.
  void crash() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGKILL);
    reap(0);
    m_exit_code = -1;  // killed here, not an exit of its own
  }

  // Waits up to 5 s for the process to exit; its exit code, or -1 if it is still running.
  int wait_exit() {
    for (int i = 0; i < 100 && m_pid > 0; ++i) {
      if (reap(WNOHANG)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return m_pid > 0 ? -1 : m_exit_code;
  }

  // "NAME=value" entries added to the daemon's environment at the next start().
  void set_env(std::vector<std::string> env) { m_env = std::move(env); }
  // The daemon's open-file limit, soft and hard (it cannot raise it), from the next start().
  void set_fd_limit(int limit) { m_fd_limit = limit; }

  const std::string& socket() const { return m_socket; }
  const std::string& log_path() const { return m_log; }
  pid_t pid() const { return m_pid; }

 private:
  // waitpid(flags) on the spawned process; true when it was reaped, its status kept in
  // m_exit_code (128 + the signal for a death by signal, as a shell reports it).
  bool reap(int flags) {
    int status = 0;
    if (m_pid <= 0 || ::waitpid(m_pid, &status, flags) != m_pid) return false;
    m_pid = -1;
    m_exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }

  std::string m_socket;
  std::string m_data_dir;
  std::vector<std::string> m_extra;
  std::vector<std::string> m_env;
  int m_fd_limit = 0;
  std::string m_log;
  pid_t m_pid = -1;
  int m_exit_code = -1;
};

// Runs a command, returning (exit code, stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace ktune::testing
