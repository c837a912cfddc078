// RedisProcess: a real redis-server on a Unix socket in a test's temp dir (no TCP port, no
// persistence), for the fleet tests. Tests skip when redis-server is not installed, and fail under
// .ci/run, whose bootstrap installs it (tests/fakes/require_tool.h). stop() and start() again give
// a Redis that lost everything, as a restart without persistence would.
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace ktune::testing {

class RedisProcess {
 public:
  // `dir`: where the socket and the log go.
  explicit RedisProcess(std::string dir) : m_dir(std::move(dir)) {}
  ~RedisProcess() { stop(); }

  // The redis-server executable on PATH, or "" when there is none.
  static std::string binary() {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/bin:/usr/local/bin";
    size_t start = 0;
    while (start <= dirs.size()) {
      const size_t end = dirs.find(':', start);
      const std::string d = dirs.substr(start, end == std::string::npos ? end : end - start);
      const std::string candidate = d + "/redis-server";
      if (!d.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return "";
  }

  std::string socket() const { return m_dir + "/redis.sock"; }

  // Starts redis-server and waits (5 s at most) until it answers PING.
  bool start() {
    const std::string bin = binary();
    if (bin.empty()) return false;
    m_pid = ::fork();
    if (m_pid == 0) {
      const std::string log = m_dir + "/redis.log";
      std::vector<std::string> args = {
          bin, "--port",       "0",  "--unixsocket", socket(), "--unixsocketperm", "700", "--save",
          "",  "--appendonly", "no", "--dir",        m_dir,    "--logfile",        log};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    for (int i = 0; i < 250; ++i) {
      if (ping()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // SIGTERM and wait: the socket goes away with everything Redis held.
  void stop() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGTERM);
    int status = 0;
    ::waitpid(m_pid, &status, 0);
    m_pid = -1;
    std::error_code ec;
    std::filesystem::remove(socket(), ec);
  }

  // Whether redis-server answers PING on its socket now.
  bool ping() const {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket().c_str(), sizeof a.sun_path - 1);
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      const char ping[] = "PING\r\n";
      char buf[16] = {};
      ok = ::write(fd, ping, sizeof ping - 1) == ssize_t(sizeof ping - 1) &&
           ::read(fd, buf, sizeof buf - 1) > 0 && std::strncmp(buf, "+PONG", 5) == 0;
    }
    ::close(fd);
    return ok;
  }

 private:
  std::string m_dir;
  pid_t m_pid = -1;
};

}  // namespace ktune::testing
