// Output helpers shared by the CLI's commands: errors, --json documents, lists.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "client/protocol.h"

namespace ktune::cli {

// The CLI's exit codes: one table, printed by `ktune --help` and documented in docs/cli.md (a
// test checks the two agree). Scripts branch on these; never renumber.
enum class Exit : int {
  ok = 0,
  failed = 1,  // the operation ran and failed: a compile error, a failed job, a file I/O error,
               // a daemon error not listed below (bad_request, internal)
  usage = 2,   // the command line: unknown flag, missing or malformed argument, bad value
  unreachable = 3,  // ktuned is not reachable (no socket, refused) or did not answer in time
  invalid = 4,      // ktuned refused the problem: unknown op, layout, dtype, dims
  not_found = 5,    // no such device class, job or template
  unavailable = 6,  // ktuned cannot do it here: no GPU for this device class, queue full
  denied = 7,       // unauthorized (token, uid) or forbidden (an admin op with read rights)
  // 128 + the signal (the shell's convention): a long local command (`ktune compile`) stopped by
  // SIGINT or SIGTERM, after printing what it finished.
  interrupted = 130,  // SIGINT
  terminated = 143,   // SIGTERM
};

struct ExitCodeRow {
  Exit code;
  std::string_view meaning;
};
inline constexpr ExitCodeRow k_exit_codes[] = {
    {Exit::ok, "success"},
    {Exit::failed, "the operation failed (compile error, failed job, file I/O, daemon error)"},
    {Exit::usage, "usage: unknown flag, missing or malformed argument, value out of range"},
    {Exit::unreachable, "ktuned is not reachable or did not answer within --timeout-ms"},
    {Exit::invalid, "ktuned refused the problem: unknown op, layout, dtype or dims"},
    {Exit::not_found, "not found: device class, job or template"},
    {Exit::unavailable, "unavailable here: no GPU of that device class, job queue full"},
    {Exit::denied, "denied: token or uid not allowed, or an admin op with read rights"},
    {Exit::interrupted, "interrupted by SIGINT (compile: results so far printed)"},
    {Exit::terminated, "terminated by SIGTERM (compile: results so far printed)"},
};

// The exit-code table as `ktune --help` prints it.
inline std::string exit_code_help() {
  std::string s = "Exit codes:\n";
  for (const auto& row : k_exit_codes)
    s += "  " + std::to_string(int(row.code)) + "  " + std::string(row.meaning) + "\n";
  return s;
}

inline Exit exit_for(protocol::ErrorKind k) {
  using K = protocol::ErrorKind;
  switch (k) {
    case K::connection_failed:
    case K::timeout:
    case K::too_many_connections:
      return Exit::unreachable;
    case K::invalid_problem:
      return Exit::invalid;
    case K::not_found:
      return Exit::not_found;
    case K::unavailable:
      return Exit::unavailable;
    case K::unauthorized:
    case K::forbidden:
      return Exit::denied;
    default:
      return Exit::failed;
  }
}

// Reports one failure and returns its exit code: "ktune: CODE: message" on stderr or, with
// --json, {"schema_version", "error": {"code", "message", "exit_code"}} on stdout (a script
// reads one stream either way). `code` is the daemon's error code, or "usage"/"failed".
inline int report_failure(bool json, Exit exit, std::string_view code, const std::string& message) {
  if (json) {
    protocol::Json err = {{"code", code}, {"message", message}, {"exit_code", int(exit)}};
    protocol::Json out = {{"schema_version", protocol::k_cli_schema_version}, {"error", err}};
    std::printf("%s\n", out.dump(2, ' ', false, protocol::Json::error_handler_t::replace).c_str());
  } else {
    std::fprintf(stderr, "ktune: %s: %s\n", std::string(code).c_str(), message.c_str());
  }
  return int(exit);
}

// A daemon or client error.
inline int report_error(bool json, const protocol::Error& e) {
  return report_failure(json, exit_for(e.kind), protocol::to_string(e.kind), e.message);
}

// An error of a command with --device that named none: "this node has no GPU" says which flag
// names a device class (the daemon's message names no flag or field).
inline int report_device_error(bool json, protocol::Error e, const std::string& device) {
  if (e.kind == protocol::ErrorKind::unavailable && device.empty() &&
      e.message.find("no GPU") != std::string::npos)
    e.message += "; pass it with --device (any unique part of a class id)";
  return report_error(json, e);
}

// A bad command-line value (exit 2), e.g. usage(c.json, "--shape: ...").
inline int usage(bool json, const std::string& message) {
  return report_failure(json, Exit::usage, "usage", message);
}

// The operation failed here (exit 1): a file that cannot be written, a local compile.
inline int failed(bool json, const std::string& message) {
  return report_failure(json, Exit::failed, "failed", message);
}

// A --json document: the result with the CLI's schema_version.
inline void print_json(protocol::Json j) {
  protocol::Json out = {{"schema_version", protocol::k_cli_schema_version}};
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = it.value();
  std::printf("%s\n", out.dump(2).c_str());
}

inline std::string join(const protocol::Json& arr, const char* sep = ",") {
  std::string s;
  for (const auto& v : arr)
    s += (s.empty() ? "" : sep) + (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

// "m:ss" for progress lines.
inline std::string clock_text(double s) {
  const int t = int(std::lround(std::max(0.0, s)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d", t / 60, t % 60);
  return buf;
}

}  // namespace ktune::cli
