#include "daemon/systemd.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "config/log.h"

namespace ktune {

namespace {

// Sends `state` (newline-separated KEY=VALUE assignments) when systemd asked for notifications.
void notify(const std::string& state) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (!socket || !*socket) return;
  // unset_environment = 0: the variable stays for later notifications. Worker processes inherit
  // it but never notify, and systemd accepts only the main pid's messages (NotifyAccess=main).
  if (int r = ::sd_notify(0, state.c_str()); r < 0)
    log(LogLevel::warn, "sd_notify_failed", {{"state", state}, {"error", std::strerror(-r)}});
}

std::string status_line(std::string_view status) {
  // STATUS= ends at the first newline; keep only the first line of what the caller gave.
  return std::string(status.substr(0, status.find('\n')));
}

}  // namespace

void notify_ready(std::string_view status) {
  notify("READY=1\nSTATUS=" + status_line(status));
}

void notify_status(std::string_view status) {
  notify("STATUS=" + status_line(status));
}

void notify_stopping() {
  notify("STOPPING=1");
}

void notify_reloading() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const long long usec = static_cast<long long>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1'000;
  notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

}  // namespace ktune
