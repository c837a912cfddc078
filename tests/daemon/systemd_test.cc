// systemd integration: the sd_notify wrapper against a real notification socket, and the shipped
// unit (config/ktuned.service) agreeing with the node configuration (config/ktuned-node.yaml).
// `systemd-analyze verify` on the unit is a separate ctest (systemd_unit_test.sh).
#include "daemon/systemd.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "config/config.h"

namespace ktune {
namespace {

// A datagram socket standing in for systemd's, with NOTIFY_SOCKET pointing at it while alive.
class NotifySocket {
 public:
  NotifySocket()
      : m_path(std::filesystem::temp_directory_path() /
               ("ktune-notify-" + std::to_string(::getpid()))) {
    std::filesystem::remove(m_path);
    m_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", m_path.c_str());
    EXPECT_EQ(::bind(m_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval timeout{5, 0};  // a message that never comes fails the test instead of hanging it
    ::setsockopt(m_fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ::setenv("NOTIFY_SOCKET", m_path.c_str(), 1);
  }
  ~NotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::close(m_fd);
    std::filesystem::remove(m_path);
  }

  // The next datagram, or nullopt when none is waiting (`wait` false) or none came in 5 s.
  std::optional<std::string> receive(bool wait = true) {
    char buf[4096];
    const ssize_t n = ::recv(m_fd, buf, sizeof buf, wait ? 0 : MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    return std::string(buf, size_t(n));
  }

 private:
  std::filesystem::path m_path;
  int m_fd = -1;
};

TEST(SystemdNotify, SendsReadyStatusStoppingAndReloading) {
  NotifySocket systemd;
  notify_ready("serving on /run/ktune/ktuned.sock\nsecond line dropped");
  EXPECT_EQ(systemd.receive(), "READY=1\nSTATUS=serving on /run/ktune/ktuned.sock");
  notify_status("GPU 0 paused: foreign process 1234 on GPU");
  EXPECT_EQ(systemd.receive(), "STATUS=GPU 0 paused: foreign process 1234 on GPU");
  notify_stopping();
  EXPECT_EQ(systemd.receive(), "STOPPING=1");
  notify_reloading();
  const auto reloading = systemd.receive();
  ASSERT_TRUE(reloading);
  EXPECT_EQ(reloading->rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << *reloading;
  EXPECT_GT(std::stoll(reloading->substr(reloading->rfind('=') + 1)), 0);  // the µs value
}

TEST(SystemdNotify, SendsNothingWithoutNotifySocket) {
  NotifySocket systemd;
  ::unsetenv("NOTIFY_SOCKET");
  notify_ready("ready");
  notify_status("status");
  notify_stopping();
  notify_reloading();
  EXPECT_EQ(systemd.receive(/*wait=*/false), std::nullopt);
}

// "Key=Value" lines of a unit file (the last one wins; comments and sections skipped).
std::map<std::string, std::string> unit_settings(const std::string& path) {
  std::map<std::string, std::string> settings;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    if (auto eq = line.find('='); eq != std::string::npos)
      settings[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return settings;
}

TEST(SystemdUnit, NodeConfigMatchesTheUnitsDirectories) {
  const std::string root = KTUNE_SOURCE_DIR;
  auto unit = unit_settings(root + "/config/ktuned.service");
  ASSERT_EQ(unit["Type"], "notify");
  ASSERT_EQ(unit["RuntimeDirectory"], "ktune");
  ASSERT_EQ(unit["StateDirectory"], "ktune");
  EXPECT_NE(unit["ExecStart"].find("--config /etc/ktune/ktuned.yaml"), std::string::npos);
  EXPECT_EQ(unit.count("MemoryDenyWriteExecute"), 0u);

  DaemonConfig config = default_config();
  auto ok = apply_config_file(config, root + "/config/ktuned-node.yaml");
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_TRUE(validate_config(config));
  EXPECT_EQ(config.socket_path, "/run/" + unit["RuntimeDirectory"] + "/ktuned.sock");
  EXPECT_EQ(config.data_dir, "/var/lib/" + unit["StateDirectory"]);
  EXPECT_EQ(config.gpu_policy, "idle");
}

}  // namespace
}  // namespace ktune
