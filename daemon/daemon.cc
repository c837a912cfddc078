#include "daemon/daemon.h"

#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "config/log.h"
#include "config/text.h"
#include "daemon/catalog.h"
#include "daemon/dispatcher.h"
#include "daemon/fleet/sync.h"
#include "daemon/jobs/queue.h"
#include "daemon/jobs/scheduler.h"
#include "daemon/kernels.h"
#include "daemon/lookups.h"
#include "daemon/process.h"
#include "daemon/server.h"
#include "daemon/systemd.h"
#include "ktune_version.h"
#include "store/rocksdb_store.h"
#include "store/table_io.h"
#include "templates/registry.h"

namespace ktune {

ConfigSearch ConfigSearch::from_environment() {
  ConfigSearch search;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) search.xdg_config_home = x;
  if (const char* h = std::getenv("HOME"); h && *h) search.home = h;
  return search;
}

std::string find_config_file(const std::string& flag, const ConfigSearch& search) {
  if (!flag.empty()) return flag;
  std::vector<std::string> candidates;
  if (!search.xdg_config_home.empty())
    candidates.push_back(search.xdg_config_home + "/ktune/ktuned.yaml");
  else if (!search.home.empty())
    candidates.push_back(search.home + "/.config/ktune/ktuned.yaml");
  candidates.push_back(search.system_file);
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec)) return c;
  }
  return "";
}

Result<DaemonConfig> build_config(const DaemonFlags& flags,
                                  const std::map<std::string, std::string>& env) {
  DaemonConfig config = default_config();
  if (!flags.config_file.empty())
    if (auto ok = apply_config_file(config, flags.config_file); !ok)
      return std::unexpected(ok.error());
  if (auto ok = apply_config_env(config, env); !ok) return std::unexpected(ok.error());
  std::vector<std::string> assignments;
  if (!flags.socket.empty()) assignments.push_back("server.socket=" + flags.socket);
  if (!flags.data_dir.empty()) assignments.push_back("store.data_dir=" + flags.data_dir);
  if (!flags.log_format.empty()) assignments.push_back("log.format=" + flags.log_format);
  assignments.insert(assignments.end(), flags.assignments.begin(), flags.assignments.end());
  for (const auto& a : assignments)
    if (auto ok = apply_config_assignment(config, a); !ok) return std::unexpected(ok.error());
  config.data_dir = expand_home(config.data_dir);
  config.socket_path = expand_home(config.socket_path);
  if (auto ok = validate_config(config); !ok) return std::unexpected(ok.error());
  return config;
}

namespace {

// Reads a seed table and merges it through the catalog.
Result<ImportReport> seed(Catalog& catalog, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  auto report = catalog.import(text.str(), path, Catalog::Written::moved_to_index);
  if (!report) return std::unexpected(report.error());
  if (!report->applied()) return fail(ErrorCode::invalid_argument, report->rejection_summary());
  return report;
}

}  // namespace

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Warns when the configuration file changed since start (and whether it still loads: if not,
// the next start fails).
void check_config_file(const ConfigFileAtStart& at_start) {
  if (at_start.path.empty() || file_text(at_start.path) == at_start.text) return;
  DaemonConfig scratch = default_config();
  auto loads = apply_config_file(scratch, at_start.path);
  log(loads ? LogLevel::warn : LogLevel::error, "config_changed_not_applied",
      {{"file", at_start.path},
       {"action", "a reload does not apply the configuration file: restart ktuned to apply it"},
       {"loads", loads ? "yes" : "no: the next start will fail: " + loads.error().message}});
}

void reload(const DaemonConfig& config, Catalog& catalog, Metrics& metrics,
            const ConfigFileAtStart& config_file) {
  notify_reloading();
  check_config_file(config_file);
  bool ok = true;
  if (!config.log_file.empty())
    if (auto reopened = log_to_file(config.log_file); !reopened) {
      ok = false;
      log(LogLevel::error, "log_reopen_failed", {{"error", reopened.error().message}});
    }
  // Templates first (the directories scanned afresh, served all or nothing): a seed table
  // deployed with a new template names it.
  auto changes = catalog.replace_templates(TemplateRegistry::load(config.template_dirs));
  std::string templates_result = "unchanged";
  if (!changes) {
    ok = false;
    templates_result = "kept";
    log(LogLevel::error, "reload_templates_failed",
        {{"error", changes.error().message},
         {"action", "kept the " + std::to_string(catalog.templates()->all().size()) +
                        " templates loaded; fix the template directory and reload again"}});
  } else if (!changes->empty()) {
    templates_result = "swapped";
    log(LogLevel::info, "templates_swapped",
        {{"added", joined(changes->added, {}, ",")},
         {"changed", joined(changes->changed, {}, ",")},
         {"removed", joined(changes->removed, {}, ",")}});
  }
  size_t merged = 0, added = 0, replaced = 0, failed = 0;
  for (const auto& table : config.seed_tables) {
    auto report = seed(catalog, table);
    if (!report) {
      ++failed;
      log(LogLevel::error, "reload_table_failed",
          {{"table", table}, {"error", report.error().message}});
      continue;
    }
    ++merged;
    added += report->added;
    replaced += report->replaced;
  }
  ok = ok && failed == 0;
  metrics.count_reload(ok ? Metrics::Reload::ok : Metrics::Reload::failed);
  log(LogLevel::info, "reloaded",
      {{"tables", merged},
       {"tables_failed", failed},
       {"winners_added", added},
       {"winners_replaced", replaced},
       {"winners", catalog.index().size()},
       {"templates", templates_result},
       {"templates_added", changes ? changes->added.size() : 0},
       {"templates_changed", changes ? changes->changed.size() : 0},
       {"templates_removed", changes ? changes->removed.size() : 0},
       {"templates_served", catalog.templates()->all().size()}});
  notify_ready("reloaded: " + std::to_string(catalog.index().size()) + " winners, " +
               std::to_string(catalog.templates()->all().size()) + " templates");
}

namespace {

// Raises the soft open-file limit to the hard one (systemd's default soft limit, 1024, is under
// the default connection cap plus the daemon's own descriptors), and warns when even that is too
// low for server.max_connections: past it, clients wait in the backlog instead of being told
// too_many_connections.
void raise_fd_limit(const DaemonConfig& config) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  // The listeners, the store's files, workers' pipes, logs: well under this.
  const rlim_t needed = rlim_t(config.max_connections) + 256;
  if (limit.rlim_cur < needed)
    log(LogLevel::warn, "fd_limit_low",
        {{"limit", std::to_string(limit.rlim_cur)},
         {"needed", std::to_string(needed)},
         {"hint", "raise LimitNOFILE (the unit sets 65536) or lower server.max_connections"}});
  else if (limit.rlim_cur != before)
    log(LogLevel::debug, "fd_limit_raised",
        {{"from", std::to_string(before)}, {"to", std::to_string(limit.rlim_cur)}});
}

}  // namespace

int run_daemon(const DaemonFlags& given) {
  DaemonFlags flags = given;
  flags.config_file = find_config_file(given.config_file, ConfigSearch::from_environment());
  const auto environment = ktune_environment();
  auto config = build_config(flags, environment);
  if (!config) {
    std::fprintf(stderr, "ktuned: %s\n", config.error().message.c_str());
    return 1;
  }
  if (flags.print_config) {
    std::fputs(config_to_yaml(*config).c_str(), stdout);
    return 0;
  }
  auto fatal = [](const std::string& what) {
    log(LogLevel::error, "startup_failed", {{"error", what}});
    std::fprintf(stderr, "ktuned: %s\n", what.c_str());
    return 1;
  };
  if (!config->log_file.empty())
    if (auto ok = log_to_file(config->log_file); !ok) return fatal(ok.error().message);
  log_setup(config->log_level, config->log_format);
  for (const auto& name : unknown_environment(environment))
    log(LogLevel::warn, "unknown_environment", {{"variable", name}, {"effect", "none"}});

  if (flags.recover) return run_recovery(*config);
  raise_fd_limit(*config);
  const ConfigFileAtStart config_file{
      flags.config_file, flags.config_file.empty() ? "" : file_text(flags.config_file)};

  // One io_context for the listeners and signals, plus one per I/O thread for the sessions.
  boost::asio::io_context io;
  // Installed first: a SIGHUP while the store opens waits for the handler instead of killing.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::unique_ptr<boost::asio::io_context>> session_contexts;
  std::vector<boost::asio::io_context*> session_pointers;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards;
  for (int i = 0; i < config->io_threads; ++i) {
    session_contexts.push_back(std::make_unique<boost::asio::io_context>(1));
    session_pointers.push_back(session_contexts.back().get());
    guards.push_back(boost::asio::make_work_guard(*session_contexts.back()));
  }
  // Every listener before the store: a second daemon stops here, having touched nothing.
  Metrics metrics;
  Server server(io, *config, metrics, session_pointers);
  if (auto ok = server.bind(); !ok) return fatal(ok.error().message);

  auto store = RocksDbStore::open(config->data_dir + "/db");
  if (!store) return fatal(store.error().message);
  for (const auto& w : (*store)->open_warnings())
    log(LogLevel::warn, "store_log_tail_dropped", {{"store", (*store)->describe()}, {"detail", w}});

  TemplateSet templates(TemplateRegistry::load(config->template_dirs));
  for (const auto& e : templates.current()->errors())
    log(LogLevel::warn, "template_skipped", {{"error", e.message}});

  NodeIdentity detected = NodeIdentity::detect(*config);
  if (!config->fleet_node_name.empty()) detected.node_id = config->fleet_node_name;
  const NodeIdentity& node = detected;
  WinnerIndex index;
  Catalog catalog(**store, index, templates, node);
  if (auto ok = catalog.load(); !ok) return fatal(with_recover_hint(ok.error()).message);
  for (const auto& table : config->seed_tables)
    if (auto ok = seed(catalog, table); !ok)
      return fatal("seed table " + table + ": " + ok.error().message);

  PinTable pins(**store, index, node);
  if (auto ok = pins.load(); !ok) return fatal(with_recover_hint(ok.error()).message);
  trim_heap("start");  // what reading the store and the seed tables freed
  MissTracker misses(size_t(config->miss_tracker_bytes),
                     std::chrono::milliseconds(std::int64_t(config->miss_retry_seconds * 1000)));
  LookupService lookups(*config, templates, catalog, pins, node, metrics, misses);
  JobQueue jobs(**store, config->max_queued_jobs);
  auto resumed = jobs.load();
  if (!resumed) return fatal("jobs: " + with_recover_hint(resumed.error()).message);
  Compiler compiler({.threads = unsigned(config->compile_threads), .cache = store->get()});
  auto fleet = FleetSync::create({*config, catalog, jobs, **store, node, pins});
  if (!fleet) return fatal(fleet.error().message);
  Scheduler scheduler({*config, templates, **store, catalog, jobs, misses, node, metrics, compiler,
                       *fleet ? &(*fleet)->claims() : nullptr});
  KernelService kernels(templates, lookups, store->get(),
                        [&compiler](CompileRequest r, std::function<void(CompileResult)> done) {
                          compiler.submit(std::move(r), std::move(done));
                        });
  OpContext ctx{*config, **store, templates, catalog, node,       metrics,
                misses,  lookups, pins,      jobs,    &scheduler, &kernels};
  ctx.fleet = fleet->get();
  Executor executor(config->executor_threads, 10);
  Dispatcher dispatcher(ctx, &executor);

  // Ready: the store is open (above) and templates are loaded; stop() adds "shutting down".
  server.set_readiness([&templates]() -> std::string {
    if (templates.current()->all().empty()) return "no templates loaded (templates.dirs)";
    return "";
  });
  server.serve(dispatcher);
  if (*fleet) (*fleet)->start();  // before the lanes: they claim keys through it
  if (auto ok = scheduler.start(); !ok) return fatal(ok.error().message);

  std::thread stopper;     // started by the first stop signal
  bool stop_done = false;  // the stopper finished: no handler re-arms (io thread only)
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        // A signal queued before the stop's cancel() still arrives with success: re-arming then
        // would keep io.run() from returning.
        if (ec || stop_done) return;
        if (sig == SIGHUP) {
          if (stopper.joinable()) {
            log(LogLevel::info, "reload_skipped", {{"signal", sig}, {"why", "stopping"}});
          } else {
            log(LogLevel::info, "reload", {{"signal", sig}});
            executor.post([&] { reload(*config, catalog, metrics, config_file); });
          }
          signals.async_wait(on_signal);
          return;
        }
        if (stopper.joinable()) {
          // A second stop signal: whoever sent it will not wait for the drain or for a lane's
          // trial (up to tuning.trial_timeout_ms). What was committed is in the store's log;
          // running jobs are still recorded as running and resume at the next start; workers
          // die with this process (PR_SET_PDEATHSIG).
          log(LogLevel::warn, "shutdown_forced",
              {{"signal", sig},
               {"detail",
                "second stop signal: exiting now; running jobs resume at the next "
                "start"}});
          std::_Exit(128 + sig);
        }
        log(LogLevel::info, "shutdown",
            {{"signal", sig}, {"detail", "draining; a second SIGTERM or SIGINT exits at once"}});
        signals.async_wait(on_signal);  // a SIGHUP is skipped, a second stop signal forces
        notify_stopping();
        server.stop();  // the connections drain from now on, on their own threads
        // Lanes end at their next trial (up to a trial timeout away): not on this thread, which
        // runs the listeners and the drain's start. `io` is kept running until the stopper is
        // done, so the guards are released there, after close_all() (no session can start on
        // a context whose threads have returned).
        stopper = std::thread([&, keep = boost::asio::make_work_guard(io)]() mutable {
          try {
            scheduler.stop();  // running jobs go back to the queue
            jobs.stop();
          } catch (const std::exception& e) {
            log(LogLevel::error, "stop_failed", {{"what", e.what()}});
          }
          boost::asio::post(io, [&, keep = std::move(keep)]() mutable {
            for (auto& g : guards) g.reset();  // session threads end when their sessions close
            stop_done = true;
            signals.cancel();  // the wait for a second signal: io.run() returns
            keep.reset();
          });
        });
      };
  signals.async_wait(on_signal);

  std::string gpus;
  for (const auto& g : node.gpus) gpus += (gpus.empty() ? "" : ",") + g.device_class.id();
  log(LogLevel::info, "ready",
      {{"version", k_version},
       {"config", flags.config_file.empty() ? "none (defaults)" : flags.config_file},
       {"socket", config->socket_path},
       {"tcp", server.tcp_endpoint()},
       {"metrics", server.metrics_endpoint()},
       {"store", (*store)->describe()},
       {"winners", index.size()},
       {"templates", templates.current()->all().size()},
       {"gpus", gpus.empty() ? "none (" + node.gpu_error + ")" : gpus},
       {"gpu_policy", config->gpu_policy},
       {"jobs_resumed", *resumed},
       {"fleet", *fleet ? config->fleet_redis : "off"},
       {"pid", ::getpid()}});
  notify_ready("serving " + std::to_string(index.size()) +
               " winners; lanes: " + std::to_string(node.gpus.size()));

  std::vector<std::thread> threads;
  for (auto& ctx_ptr : session_contexts) threads.emplace_back([&ctx_ptr] { ctx_ptr->run(); });
  io.run();
  // Nothing waits on the stop signals any more; what is left (the connections' drain, up to
  // server.drain_timeout_ms, the executor, the compiles) ends at a second one, by its default
  // action, as documented.
  signals.remove(SIGINT);
  signals.remove(SIGTERM);
  if (stopper.joinable()) stopper.join();
  for (auto& t : threads) t.join();
  executor.stop();
  kernels.stop();                // compiles still running answer nobody: their sessions are gone
  if (*fleet) (*fleet)->stop();  // after the lanes, which give their claims back
  log(LogLevel::info, "stopped");
  return 0;
}

}  // namespace ktune
