// The daemon's wiring: configuration precedence, store, templates, seed tables, index, node
// identity, dispatcher and server, assembled in one place so main() stays thin and tests can start
// a full daemon in-process.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace ktune {

class Catalog;
class Metrics;

struct DaemonFlags {
  std::string config_file;  // --config; "" = find_config_file()'s search
  std::string socket;
  std::string data_dir;
  std::vector<std::string> assignments;  // key=value
  std::string log_format;
  bool recover = false;
  bool print_config = false;
};

// Where ktuned looks for its configuration file when --config is not given.
struct ConfigSearch {
  std::string xdg_config_home;  // $XDG_CONFIG_HOME; "" = <home>/.config
  std::string home;             // $HOME
  std::string system_file = "/etc/ktune/ktuned.yaml";
  static ConfigSearch from_environment();
};

// The configuration file ktuned reads: `flag` (--config) when given, else the first of
// $XDG_CONFIG_HOME/ktune/ktuned.yaml (~/.config/ktune/ktuned.yaml) and /etc/ktune/ktuned.yaml
// that exists; "" when none does (the embedded defaults alone).
std::string find_config_file(const std::string& flag, const ConfigSearch& search);

// defaults < file < KTUNE_* environment < flags. flags.config_file is read as given (resolve it
// with find_config_file first).
Result<DaemonConfig> build_config(const DaemonFlags& flags,
                                  const std::map<std::string, std::string>& env);

// Runs ktuned until SIGINT/SIGTERM; returns the process exit code (0 clean, 1 startup failure).
// Every listener is bound before the store is opened: a second daemon fails having touched
// nothing. SIGHUP runs reload() on the executor. With flags.recover, runs run_recovery instead
// and returns its code.
int run_daemon(const DaemonFlags& flags);

// What SIGHUP does: reopens log.file, merges the seed tables again and serves the template
// directories as they are now (Catalog::replace_templates: all or nothing; a manifest that does
// not load keeps every loaded template). Logs `reloaded templates=swapped|unchanged|kept
// templates_added=.. templates_changed=.. templates_removed=..` and counts the reload in
// `metrics` (failed when anything did not load). Never fails the daemon. Runs disk work: call it
// off the I/O threads.
// The configuration file as the daemon read it at start. A reload does not apply it (sockets,
// threads and the store stay as they are): it logs config_changed_not_applied when the file
// changed since start, saying whether it still loads.
struct ConfigFileAtStart {
  std::string path;  // "" = none
  std::string text;
};
void reload(const DaemonConfig& config, Catalog& catalog, Metrics& metrics,
            const ConfigFileAtStart& config_file = {});

// `ktuned --recover`: repairs the store if it is damaged, reports what was dropped or rolled back
// (log lines and a summary on stderr) and returns the exit code: 0 nothing was lost (or the store
// was healthy), 2 repaired but records were lost or rolled back, 1 the store could not be repaired.
int run_recovery(const DaemonConfig& config);

}  // namespace ktune
