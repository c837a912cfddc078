// ktune: the command-line client of ktuned. Thin: CLI11 parsing over client/cli/commands.h.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "client/cli/commands.h"
#include "client/cli/completion.h"
#include "client/cli/output.h"
#include "config/text.h"
#include "ktune_version.h"
#include "tuner/strategy/registry.h"

namespace {

// A flag's value must be a number above 0. (CLI::PositiveNumber's message is "Value 0 not in
// range 0.000000 to 17976931348623157...", the 309 digits of the largest double.)
const CLI::Validator k_positive(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !std::isfinite(v) || !(v > 0))
        return "must be a number above 0, got '" + s + "'";
      return "";
    },
    "> 0", "POSITIVE");

// host:port with a port 1..65535 ("127.0.0.1:7777", "[::1]:7777").
const CLI::Validator k_host_port(
    [](std::string& s) -> std::string {
      const auto colon = s.rfind(':');
      const std::string port = colon == std::string::npos ? "" : s.substr(colon + 1);
      char* end = nullptr;
      const long p = std::strtol(port.c_str(), &end, 10);
      if (colon == std::string::npos || colon == 0 || port.empty() || *end != '\0' || p < 1 ||
          p > 65535)
        return "expected host:port with a port 1..65535, got '" + s + "'";
      return "";
    },
    "HOST:PORT", "HOST:PORT");

// -o "" is a slip (an unset shell variable), not a request for stdout ("-" is that).
const CLI::Validator k_path(
    [](std::string& s) -> std::string {
      return s.empty() ? "must name a file (- for stdout where the command allows it)" : "";
    },
    "PATH", "PATH");

// --config "" is a slip too (an unset variable), not "no --config": compile would sample configs.
const CLI::Validator k_config(
    [](std::string& s) -> std::string {
      return s.empty() ? "must name a config, NAME=V,... (e.g. BLOCK_M=128,BLOCK_N=128,...)" : "";
    },
    "NAME=V,...", "CONFIG");

// "unknown command 'lokup' (commands: status, ...)" when the first word that is neither a global
// flag nor its value names no command, or "unknown command 'pin crate' (pin commands: create,
// ...)" when the word after a command that has commands of its own names none of them; ""
// otherwise (CLI11 calls either a missing command: "A subcommand is required").
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* current = &app;
  std::string path;  // the commands named so far: "", "pin", "plan", ...
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--socket" || word == "--tcp" || word == "--token" || word == "--timeout-ms") {
      ++i;  // its value
      continue;
    }
    if (word.starts_with("-")) continue;
    const auto subs = current->get_subcommands({});
    if (subs.empty()) return "";  // an argument of a command, not a command
    const auto it = std::find_if(subs.begin(), subs.end(),
                                 [&](const CLI::App* s) { return s->get_name() == word; });
    if (it != subs.end()) {
      current = *it;
      path += (path.empty() ? "" : " ") + word;
      continue;
    }
    return "unknown command '" + (path.empty() ? "" : path + " ") + word + "' (" +
           (path.empty() ? "" : path + " ") +
           "commands: " + ktune::joined(subs, [](const CLI::App* s) { return s->get_name(); }) +
           ")";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ktune::cli;
  CLI::App app{"ktune — ask ktuned for the best kernel; manage its tuning tables"};
  app.footer("Global flags work in any position.\n\n" + exit_code_help() +
             "\nWith --json, a failure is {\"error\": {\"code\", \"message\", \"exit_code\"}} on "
             "stdout. docs/cli.md has the details.");
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", std::string("ktune ") + ktune::k_version + " (" + ktune::k_git_describe + ")");
  // Global flags work in any position: a subcommand (and its own subcommands, which inherit this)
  // hands an option it does not know to its parent, so `ktune lookup ... --json` is `--json`.
  app.fallthrough();
  Common common;
  app.add_option("--socket", common.socket,
                 "ktuned's Unix socket (default: $KTUNE_SOCKET or the daemon's default)");
  app.add_option("--tcp", common.tcp, "connect over TCP to host:port instead")->check(k_host_port);
  app.add_option("--token", common.token, "token for TCP requests");
  auto* timeout = app.add_option("--timeout-ms", common.timeout_ms,
                                 "per-request deadline (default 5000; kernel: 60000; export and "
                                 "import: none; 0: none)")
                      ->check(CLI::Range(0, INT_MAX));
  app.add_flag("--json", common.json, "machine-readable output (with schema_version)");

  auto* status = app.add_subcommand("status", "show the daemon's state");
  auto* templates =
      app.add_subcommand("templates", "list kernel templates and their search spaces");

  LookupArgs lookup;
  auto* lk = app.add_subcommand("lookup", "best kernels for a problem, ranked, with provenance");
  lk->add_option("op", lookup.op, "operation, e.g. gemm, softmax")->required();
  lk->add_option("--dtype", lookup.dtype, "input dtype: bf16 fp16 fp32")->capture_default_str();
  lk->add_option("--out-dtype", lookup.out_dtype, "output dtype (default: same as --dtype)");
  lk->add_option("--layout", lookup.layout,
                 "layout, e.g. rr rc for gemm (default: the op's usual one, rc for gemm)");
  lk->add_option("--shape", lookup.shape, "dims, e.g. M=4096,N=4096,K=4096")->required();
  lk->add_option("--device", lookup.device, "device class id or prefix (default: this node's GPU)");
  lk->add_option("--limit", lookup.limit, "most entries (1..64)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  lk->add_option("--pin", lookup.pin, "answer from this pin only (ktune pin create)");

  KernelArgs kernel;
  auto* ke = app.add_subcommand(
      "kernel", "fetch the cubin ktuned serves for a problem (best entry, or --template/--config)");
  ke->add_option("op", kernel.problem.op, "operation, e.g. gemm")->required();
  ke->add_option("--dtype", kernel.problem.dtype, "input dtype")->capture_default_str();
  ke->add_option("--out-dtype", kernel.problem.out_dtype, "output dtype (default: same)");
  ke->add_option("--layout", kernel.problem.layout,
                 "layout (default: the op's usual one, rc for gemm)");
  ke->add_option("--shape", kernel.problem.shape, "dims, e.g. M=4096,N=4096,K=4096")->required();
  ke->add_option("--device", kernel.problem.device, "device class (default: the daemon's GPU)");
  auto* kt =
      ke->add_option("--template", kernel.template_name, "this template instead of the best");
  ke->add_option("--config", kernel.config, "its params, e.g. BLOCK_M=128,...")
      ->needs(kt)
      ->check(k_config);
  ke->add_option("-o,--output", kernel.output, "cubin file to write")->required()->check(k_path);

  std::string format = "json", output, device;
  auto* ex = app.add_subcommand("export", "write the tuning table to a file (JSON, YAML or CSV)");
  ex->add_option("--format", format, "json | yaml | csv")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "yaml", "yml", "csv"}));
  ex->add_option("-o,--output", output, "file to write (- for stdout)")->required()->check(k_path);
  ex->add_option("--device", device, "only this device class (id or any unique part of one)");

  std::string import_file;
  auto* im = app.add_subcommand("import", "merge a tuning table into the daemon's store");
  im->add_option("file", import_file, "table file as export writes it: JSON, YAML or CSV")
      ->required();

  CompileArgs compile;
  auto* co =
      app.add_subcommand("compile", "compile template configs locally with NVRTC (no GPU needed)");
  co->add_option("template", compile.template_name, "template name, e.g. gemm")->required();
  co->add_option(
        "--arch", compile.arch,
        "sm_80 | sm_86 | sm_89 | sm_90 | sm_90a (a template with arch_suffix a gets it, as lookups "
        "answer: sm_90 compiles gemm_sm90 for sm_90a)")
      ->capture_default_str();
  co->add_option("--dtype", compile.dtype, "input dtype (default: the template's first)");
  co->add_option("--out-dtype", compile.out_dtype, "output dtype");
  co->add_option("--layout", compile.layout,
                 "layout (default: the op's usual one if the template has it)");
  co->add_option("--shape", compile.shape,
                 "problem dims used to prune the space (default: 4096 each)");
  auto* cfg =
      co->add_option("--config", compile.config, "one config, e.g. BLOCK_M=128,BLOCK_N=128,...")
          ->check(k_config);
  auto* smp = co->add_option("--sample", compile.sample,
                             "compile N configs spread over the pruned space (default 8)")
                  ->check(k_positive);
  auto* all = co->add_flag("--all", compile.all, "compile every config of the pruned space");
  cfg->excludes(smp)->excludes(all);
  smp->excludes(all);
  co->add_option("--templates", compile.template_dirs, "template directories (default: built-in)");
  co->add_option("--threads", compile.threads, "compile threads (default: all cores)");
  co->add_option("--cubin-dir", compile.cubin_dir,
                 "write each compiled cubin to DIR/<template>-<config>.cubin (read its SASS with "
                 "cuobjdump -sass or nvdisasm)");

  TuneArgs tune;
  auto* tu = app.add_subcommand(
      "tune", "queue a problem for tuning on the daemon's GPU and follow it (or --standalone)");
  tu->add_option("op", tune.problem.op, "operation, e.g. gemm")->required();
  tu->add_option("--dtype", tune.problem.dtype, "input dtype")->capture_default_str();
  tu->add_option("--out-dtype", tune.problem.out_dtype, "output dtype (default: same)");
  tu->add_option("--layout", tune.problem.layout,
                 "layout (default: the op's usual one, rc for gemm)");
  tu->add_option("--shape", tune.problem.shape, "dims, e.g. M=4096,N=4096,K=4096")->required();
  tu->add_option("--strategy", tune.strategy, ktune::strategy_choices())
      ->capture_default_str()
      ->check(CLI::IsMember(ktune::strategy_names()));
  tu->add_option("--budget", tune.budget, "most configs measured")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000'000));
  tu->add_option("--seconds", tune.seconds, "most seconds")
      ->capture_default_str()
      ->check(k_positive);
  tu->add_option("--device", tune.device, "device class (default: the daemon's first GPU)");
  tu->add_flag("--no-wait", tune.no_wait, "queue the job, print its id and return");
  tu->add_flag("--standalone", tune.standalone,
               "tune here with a worker of our own instead of through the daemon");
  tu->add_option("--gpu", tune.gpu, "standalone: GPU ordinal")
      ->capture_default_str()
      ->check(CLI::Range(0, INT_MAX));
  tu->add_option("--data-dir", tune.data_dir,
                 "standalone: store (default: <state dir>/ktune/standalone)");
  tu->add_option("--templates", tune.template_dirs,
                 "standalone: template directories (default: built-in)");
  tu->add_flag("--no-import", tune.no_import, "standalone: do not hand the winner to ktuned");
  tu->add_option("--template", tune.only_templates,
                 "tune only this template (repeatable; default: every template for the op)");
  tu->add_option("--seed", tune.seeds,
                 "a whole config, NAME=V,..., measured right after the heuristic's (repeatable)");

  std::string job_state;
  int jobs_limit = 50;
  auto* jb = app.add_subcommand("jobs", "tuning jobs, newest first, with progress");
  jb->add_option("--state", job_state, "queued | running | done | failed | cancelled")
      ->check(CLI::IsMember({"queued", "running", "done", "failed", "cancelled"}));
  jb->add_option("--limit", jobs_limit, "most jobs")->capture_default_str()->check(k_positive);
  std::string job_id;
  auto* jo = app.add_subcommand("job", "one tuning job");
  jo->add_option("id", job_id, "job id")->required();
  auto* ca = app.add_subcommand("cancel", "cancel a queued or running tuning job");
  ca->add_option("id", job_id, "job id")->required();
  int misses_limit = 20;
  auto* mi = app.add_subcommand("misses", "most-missed problems and what tuning them is worth");
  mi->add_option("--limit", misses_limit, "most keys")->capture_default_str()->check(k_positive);
  std::string plan_file, plan_device;
  auto* pl = app.add_subcommand("plan", "tuning plans: problems an operator wants ready");
  auto* pa = pl->add_subcommand("apply", "queue a job for every problem of a YAML/JSON plan");
  pa->add_option("file", plan_file, "plan file (docs/operations.md shows the format)")->required();
  pa->add_option("--device", plan_device, "device class (default: the plan's, or the first GPU)");
  pl->require_subcommand(1);
  ReportArgs report;
  auto* rp = app.add_subcommand(
      "report", "write a self-contained HTML report of what was tuned (files or the daemon)");
  rp->add_option("-o,--output", report.output, "HTML file to write (- for stdout)")
      ->check(k_path)
      ->capture_default_str();
  rp->add_option("--device", report.device, "only this device class (id or part of it)");
  rp->add_option("--op", report.op, "only this op, e.g. gemm");
  rp->add_option("--trials", report.trials,
                 "trials files (ktune-bench --record) or replay files (ktune-replay)")
      ->expected(1, -1);
  rp->add_option("--table", report.table, "a winners table (export format JSON)");
  rp->add_option("--title", report.title, "the page's title");
  rp->add_flag("--daemon", report.daemon,
               "with --trials/--table: add the daemon's winners, misses and jobs");
  auto* fl = app.add_subcommand("fleet", "the fleet: Redis link, nodes seen, keys tuned, claims");
  auto* fs = fl->add_subcommand("status", "this node's link to the fleet and what the fleet holds");
  fl->require_subcommand(1);
  PinArgs pin;
  auto* pn = app.add_subcommand(
      "pin", "pins: named, immutable snapshots of the winners that lookups can be answered from");
  auto* pc = pn->add_subcommand("create", "snapshot the winners as pin NAME (fleet-wide)");
  pc->add_option("name", pin.name, "pin name: letters, digits, _ . - (at most 64)")->required();
  pc->add_option("--device", pin.device, "only this device class (id or any unique part of one)");
  pc->add_option("--op", pin.op, "only this op, e.g. gemm");
  auto* pli = pn->add_subcommand("list", "the pins, with their size and when they were made");
  auto* psh = pn->add_subcommand("show", "one pin and the winners it holds");
  psh->add_option("name", pin.name, "pin name")->required();
  auto* pde = pn->add_subcommand("delete", "delete a pin (fleet-wide)");
  pde->add_option("name", pin.name, "pin name")->required();
  pn->require_subcommand(1);
  std::string shell;
  auto* cm = app.add_subcommand("completion",
                                "print a shell completion script: source <(ktune completion bash)");
  cm->add_option("shell", shell, "bash | zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // A usage error is exit 2 whatever CLI11 numbers it; with --json (wherever it was typed,
    // the parse may have stopped before it) it is a JSON error like any other.
    bool json = false;
    for (int i = 1; i < argc; ++i) json = json || std::strcmp(argv[i], "--json") == 0;
    // CLI11 calls a misspelt command a missing one ("A subcommand is required").
    if (auto unknown = unknown_command(app, argc, argv); !unknown.empty())
      return usage(json, unknown);
    if (json) return usage(true, e.what());
    app.exit(e);
    return int(Exit::usage);
  }
  common.timeout_given = timeout->count() > 0;
  if (*status) return cmd_status(common);
  if (*templates) return cmd_templates(common);
  if (*lk) return cmd_lookup(common, lookup);
  if (*ke) return cmd_kernel(common, kernel);
  if (*ex) return cmd_export(common, format, output, device);
  if (*im) return cmd_import(common, import_file);
  if (*co) return cmd_compile(common, compile);
  if (*tu) return cmd_tune(common, tune);
  if (*jb) return cmd_jobs(common, job_state, jobs_limit);
  if (*jo) return cmd_job(common, job_id);
  if (*ca) return cmd_cancel(common, job_id);
  if (*mi) return cmd_misses(common, misses_limit);
  if (*pa) return cmd_plan_apply(common, plan_file, plan_device);
  if (*fs) return cmd_fleet_status(common);
  if (*pc) return cmd_pin_create(common, pin);
  if (*pli) return cmd_pin_list(common);
  if (*psh) return cmd_pin_show(common, pin.name);
  if (*pde) return cmd_pin_delete(common, pin.name);
  if (*rp) return cmd_report(common, report);
  if (*cm) {
    // Generated from `app` as built above, so every command and flag is in it.
    std::cout << completion_script(app, "ktune", shell == "zsh" ? Shell::zsh : Shell::bash);
    return 0;
  }
  return 2;
}
