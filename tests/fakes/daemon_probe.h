// Probes for a ktuned started by DaemonProcess: where its listeners ended up (its ready log
// line), one HTTP GET (the metrics port), a counter from the Prometheus text.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <fstream>
#include <sstream>
#include <string>

namespace ktune::testing {

// "value" of " key=value" in the last ready line of a daemon log (tcp=..., metrics=...); "" if
// absent. The line is written before the daemon serves, so after DaemonProcess::start().
inline std::string ready_field(const std::string& log_path, const std::string& key) {
  std::ifstream in(log_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string log = ss.str();
  const auto ready = log.rfind(" ready ");
  if (ready == std::string::npos) return "";
  const auto pos = log.find(" " + key + "=", ready);
  if (pos == std::string::npos) return "";
  const auto start = pos + key.size() + 2;
  return log.substr(start, log.find_first_of(" \n", start) - start);
}

// `fd` after connect() returned `rc`: with a 10 s receive timeout, or closed and -1.
inline int connected(int fd, int rc) {
  if (rc != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Connects to 127.0.0.1:<port of host_port> with a 10 s receive timeout; -1 on failure.
inline int loopback_connect(const std::string& host_port) {
  const int port = std::stoi(host_port.substr(host_port.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connected(fd, ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a));
}

// Connects a raw Unix socket (byte-level protocol tests) with a 10 s receive timeout; -1 on
// failure.
inline int unix_connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  return connected(fd, ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a));
}

// Everything the peer sends until it closes the connection (or the receive timeout passes).
inline std::string read_to_eof(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, size_t(n));
  return out;
}

// The whole response to "GET path HTTP/1.0".
inline std::string http_get(const std::string& host_port, const std::string& path) {
  const int fd = loopback_connect(host_port);
  if (fd < 0) return "connect failed";
  const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out = read_to_eof(fd);
  ::close(fd);
  return out;
}

// The value of an unlabelled counter in Prometheus text; -1 when absent.
inline long prometheus_counter(const std::string& text, const std::string& name) {
  const auto pos = text.find("\n" + name + " ");
  return pos == std::string::npos ? -1 : std::stol(text.substr(pos + name.size() + 2));
}

}  // namespace ktune::testing
