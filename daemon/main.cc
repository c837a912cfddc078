// ktuned: the node-level autotuning and kernel-selection daemon. Thin: parse flags, build the
// pieces (daemon/daemon.h), run until SIGINT/SIGTERM (SIGHUP reloads).
#include <CLI/CLI.hpp>

#include "daemon/daemon.h"
#include "ktune_version.h"

int main(int argc, char** argv) {
  ktune::DaemonFlags flags;
  CLI::App app{"ktuned — autotuning and kernel-selection service for NVIDIA GPUs"};
  app.set_version_flag(
      "--version", std::string("ktuned ") + ktune::k_version + " (" + ktune::k_git_describe + ")");
  app.add_option("--config", flags.config_file,
                 "YAML config file (see config/ktuned.yaml). Default: the first that exists of "
                 "$XDG_CONFIG_HOME/ktune/ktuned.yaml (~/.config/ktune/ktuned.yaml) and "
                 "/etc/ktune/ktuned.yaml, else none");
  app.add_option("--socket", flags.socket, "Unix socket path (server.socket)");
  app.add_option("--data-dir", flags.data_dir, "store directory (store.data_dir)");
  app.add_option("--set", flags.assignments,
                 "override any config key: --set tuning.strategy=random")
      ->take_all();
  app.add_flag("--recover", flags.recover,
               "repair a damaged store, report what was lost or rolled back, and exit "
               "(0 nothing lost, 2 records lost or rolled back, 1 not repaired)");
  app.add_flag("--print-config", flags.print_config, "print the effective configuration and exit");
  app.add_option("--log-format", flags.log_format, "text | json (log.format)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return ktune::run_daemon(flags);
}
