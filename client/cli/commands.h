// The ktune CLI's subcommands. Each returns the process exit code, one of client/cli/output.h's
// Exit table (documented in docs/cli.md); failures are reported through output.h, so --json
// turns them into JSON on stdout.
#pragma once

#include <string>
#include <vector>

#include "client/client.h"

namespace ktune::cli {

struct Common {
  std::string socket;
  std::string tcp;
  std::string token;
  int timeout_ms = 5000;
  // --timeout-ms on the command line; without it kernel requests wait 60 s, export/import none.
  bool timeout_given = false;
  bool json = false;

  ClientOptions client_options() const;
  // For ops whose time grows with the table (export, import): no deadline unless --timeout-ms.
  ClientOptions long_op_options() const;
};

int cmd_status(const Common& c);
int cmd_templates(const Common& c);

struct LookupArgs {
  std::string op;
  std::string dtype = "bf16";
  std::string out_dtype;
  std::string layout;
  std::string shape;
  std::string device;
  int limit = 4;
  std::string pin;  // answer from this pin only
};
int cmd_lookup(const Common& c, const LookupArgs& a);

// Fetches the cubin of the lookup's best entry (or of --template/--config) to a file.
struct KernelArgs {
  LookupArgs problem;         // op, dtype, out_dtype, layout, shape, device
  std::string template_name;  // "" = the best entry of a lookup
  std::string config;         // with template_name: k=v,...
  std::string output;         // the cubin file
};
int cmd_kernel(const Common& c, const KernelArgs& a);

int cmd_export(const Common& c, const std::string& format, const std::string& output,
               const std::string& device);
int cmd_import(const Common& c, const std::string& file);

struct CompileArgs {
  std::string template_name;
  std::string arch = "sm_90";
  std::string dtype;
  std::string out_dtype;
  std::string layout;
  std::string shape;
  std::string config;  // k=v,...
  int sample = 0;
  bool all = false;
  std::vector<std::string> template_dirs;
  unsigned threads = 0;
  std::string cubin_dir;  // write each compiled cubin there ("" = none)
};
int cmd_compile(const Common& c, const CompileArgs& a);

struct TuneArgs {
  LookupArgs problem;  // op, dtype, layout, shape (device unused)
  std::string strategy = "model";
  int budget = 256;
  double seconds = 600;
  int gpu = 0;
  std::string data_dir;  // the standalone store; default <state>/ktune/standalone
  std::vector<std::string> template_dirs;
  bool no_import = false;   // do not hand the winner to a running daemon
  bool standalone = false;  // tune here instead of through the daemon
  bool no_wait = false;     // daemon mode: queue the job and return its id
  std::string device;       // daemon mode: device class (default: the daemon's first GPU)
  std::vector<std::string> only_templates;  // tune only these templates (default: every one)
  std::vector<std::string> seeds;           // configs "NAME=V,..." measured early
};
// Tunes on this machine's GPU (standalone: spawns its own ktune-worker), writes the winner to the
// standalone store and, when a daemon answers, imports it there so lookups see it at once.
int cmd_tune_standalone(const Common& c, const TuneArgs& a);
// Queues the problem on the running daemon and follows the job (watch) with a progress bar.
int cmd_tune(const Common& c, const TuneArgs& a);

// Job control (client/cli/jobs.cc).
int cmd_jobs(const Common& c, const std::string& state, int limit);
int cmd_job(const Common& c, const std::string& id);
int cmd_cancel(const Common& c, const std::string& id);
int cmd_misses(const Common& c, int limit);
int cmd_plan_apply(const Common& c, const std::string& file, const std::string& device);

// `ktune report` (client/cli/report.cc): the HTML tuning report. With --trials or --table it
// reads only those files (plus the daemon with --daemon); without either, everything comes from
// the running daemon (the export, status, misses and jobs ops).
struct ReportArgs {
  std::string output = "report.html";  // "-" for stdout
  std::string device;                  // device class id or substring ("" = all)
  std::string op;                      // one op ("" = all)
  std::vector<std::string> trials;     // ktune-bench --record files
  std::string table;                   // a winners table (export format)
  std::string title;                   // "" = the default title
  bool daemon = false;                 // with files: add the daemon's winners, misses, jobs
};
int cmd_report(const Common& c, const ReportArgs& a);

// `ktune fleet status` (client/cli/fleet.cc).
int cmd_fleet_status(const Common& c);

// `ktune pin create|list|show|delete` (client/cli/pins.cc).
struct PinArgs {
  std::string name;
  std::string device;  // only this device class ("" = every class)
  std::string op;      // only this op ("" = every op)
};
int cmd_pin_create(const Common& c, const PinArgs& a);
int cmd_pin_list(const Common& c);
int cmd_pin_show(const Common& c, const std::string& name);
int cmd_pin_delete(const Common& c, const std::string& name);

}  // namespace ktune::cli
