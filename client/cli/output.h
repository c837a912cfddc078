// Output helpers shared by the CLI's commands: errors, --json documents, lists.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "client/protocol.h"

namespace ktune::cli {

// Prints a daemon or client error; returns the exit code (3: the daemon is not reachable).
inline int report_error(const protocol::Error& e) {
  std::fprintf(stderr, "ktune: %s: %s\n", std::string(protocol::to_string(e.kind)).c_str(),
               e.message.c_str());
  return e.kind == protocol::ErrorKind::connection_failed ? 3 : 1;
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
