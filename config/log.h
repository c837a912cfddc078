// Structured logging to stderr, as text for people or JSON lines for log shippers.
//
// One process-wide logger: set its level and format once at start (`log_setup`), then call
// `log(LogLevel::info, "event", {{"key", "value"}})` from any thread; each record is written with a
// single write(2) so lines from different threads never interleave.
#pragma once

#include <cstdint>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "config/error.h"

namespace ktune {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3, off = 4 };
enum class LogFormat { text, json };

std::string_view to_string(LogLevel level);

// A structured field. Numbers are passed as strings by the caller (std::to_string) and printed
// unquoted in JSON when `numeric` is set.
struct LogField {
  std::string key;
  std::string value;
  bool numeric = false;

  LogField(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  LogField(std::string k, const char* v) : key(std::move(k)), value(v) {}
  LogField(std::string k, std::string_view v) : key(std::move(k)), value(v) {}
  template <typename N>
  requires std::is_arithmetic_v<N> LogField(std::string k, N n)
      : key(std::move(k)), value(std::to_string(n)), numeric(true) {}
};

void log_setup(LogLevel level, LogFormat format);
// Points stderr (the log, and what child processes inherit) at `path`, opened for appending
// (created 0640). Called again with the same path after logrotate moved the file away, it
// reopens it: lines written meanwhile went to the old file, none is lost or split.
Result<void> log_to_file(const std::string& path);
bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view event, std::initializer_list<LogField> fields = {});

// `unix_seconds` in UTC through strftime's `format` (at most 31 characters of output).
std::string utc_strftime(std::int64_t unix_seconds, const char* format);
// "2026-12-02T01:34:10Z": `unix_seconds` as ISO-8601 UTC, the form exports, reports and the CLI
// print times in.
std::string utc_iso8601(std::int64_t unix_seconds);

// Escapes `s` as the inside of a JSON string literal.
std::string json_escape(std::string_view s);

}  // namespace ktune
