// The daemon's wiring: configuration precedence, store, templates, seed tables, index, node
// identity, dispatcher and server, assembled in one place so main() stays thin and tests can start
// a full daemon in-process.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace ktune {

struct DaemonFlags {
  std::string config_file;
  std::string socket;
  std::string data_dir;
  std::vector<std::string> assignments;  // key=value
  std::string log_format;
  bool recover = false;
  bool print_config = false;
};

// defaults < file < KTUNE_* environment < flags.
Result<DaemonConfig> build_config(const DaemonFlags& flags,
                                  const std::map<std::string, std::string>& env);

// Runs ktuned until SIGINT/SIGTERM; returns the process exit code (0 clean, 1 startup failure).
// With flags.recover, runs run_recovery instead and returns its code.
int run_daemon(const DaemonFlags& flags);

// `ktuned --recover`: repairs the store if it is damaged, reports what was dropped or rolled back
// (log lines and a summary on stderr) and returns the exit code: 0 nothing was lost (or the store
// was healthy), 2 repaired but records were lost or rolled back, 1 the store could not be repaired.
int run_recovery(const DaemonConfig& config);

}  // namespace ktune
