#include "config/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace ktune {
namespace {

std::atomic<LogLevel> g_level{LogLevel::info};
std::atomic<LogFormat> g_format{LogFormat::text};

std::string timestamp() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t secs = system_clock::to_time_t(now);
  const auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(millis));
  return buf;
}

}  // namespace

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
    case LogLevel::off:
      return "off";
  }
  return "info";
}

void log_setup(LogLevel level, LogFormat format) {
  g_level.store(level);
  g_format.store(format);
}

Result<void> log_to_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0)
    return fail(ErrorCode::io_error, path + ": cannot open log file: " + std::strerror(errno));
  // dup2 swaps the file behind descriptor 2 atomically: a concurrent write goes whole to the old
  // file or the new one.
  const bool ok = ::dup2(fd, STDERR_FILENO) >= 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return fail(ErrorCode::io_error, path + ": cannot log to it: " + std::strerror(err));
  return {};
}

bool log_enabled(LogLevel level) {
  return level >= g_level.load(std::memory_order_relaxed);
}

std::string utc_strftime(std::int64_t unix_seconds, const char* format) {
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string utc_iso8601(std::int64_t unix_seconds) {
  return utc_strftime(unix_seconds, "%Y-%m-%dT%H:%M:%SZ");
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void log(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) {
  if (!log_enabled(level) || level == LogLevel::off) return;
  std::string line;
  if (g_format.load() == LogFormat::json) {
    line = "{\"ts\":\"" + timestamp() + "\",\"level\":\"" + std::string(to_string(level)) +
           "\",\"event\":\"" + json_escape(event) + "\"";
    for (const auto& f : fields) {
      line += ",\"" + json_escape(f.key) + "\":";
      line += f.numeric ? f.value : "\"" + json_escape(f.value) + "\"";
    }
    line += "}\n";
  } else {
    line = timestamp() + " " + std::string(to_string(level)) + " " + std::string(event);
    for (const auto& f : fields) {
      const bool quote = f.value.find(' ') != std::string::npos || f.value.empty();
      line += " " + f.key + "=" + (quote ? "\"" + f.value + "\"" : f.value);
    }
    line += "\n";
  }
  // One write per record keeps concurrent lines whole.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace ktune
