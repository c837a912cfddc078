// `ktune compile`: compiles template configs here with NVRTC and reports each one's resources.
//
// Phases: plan (template, problem, configs) -> run (the Compiler's pool, a progress line on
// stderr, SIGINT/SIGTERM stop it) -> report (every config compiled so far, in request order).
// A long run (`--all` is 2,700 gemm configs) shows progress and, when interrupted, still prints
// what it compiled and exits 128 + the signal number (docs/cli.md § Errors and exit codes).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "client/cli/table.h"
#include "config/config.h"
#include "config/text.h"
#include "store/table_io.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tuner/compiler.h"

namespace ktune::cli {

using protocol::Json;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// SIGINT/SIGTERM while a compile runs: the handler only counts the signal and writes one byte to
// a self-pipe (both async-signal-safe); the run loop polls the pipe and does the rest.
std::atomic<int> g_signal{0};        // the last signal caught; 0 = none
std::atomic<int> g_signal_count{0};  // how many were caught
int g_wake_fd = -1;                  // write end of the run loop's pipe
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int signo) {
  const int saved = errno;
  g_signal.store(signo);
  g_signal_count.fetch_add(1);
  if (g_wake_fd >= 0) {
    const ssize_t n = ::write(g_wake_fd, "s", 1);  // a full pipe is already a wake-up
    (void)n;
  }
  errno = saved;
}

// A non-blocking pipe that wakes the run loop (signals, finished compiles), and the SIGINT/SIGTERM
// handlers that write to it, for as long as it lives; the previous handlers are restored after.
class WakePipe {
 public:
  WakePipe() {
    if (::pipe2(m_fds, O_CLOEXEC | O_NONBLOCK) != 0) m_fds[0] = m_fds[1] = -1;
    g_wake_fd = m_fds[1];
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &m_old_int);
    ::sigaction(SIGTERM, &sa, &m_old_term);
  }
  ~WakePipe() {
    ::sigaction(SIGINT, &m_old_int, nullptr);
    ::sigaction(SIGTERM, &m_old_term, nullptr);
    g_wake_fd = -1;
    for (int fd : m_fds)
      if (fd >= 0) ::close(fd);
  }
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;

  // From any thread.
  void wake() {
    if (m_fds[1] >= 0) {
      const ssize_t n = ::write(m_fds[1], "c", 1);
      (void)n;
    }
  }
  // Waits until woken or `timeout_ms` passes, then empties the pipe.
  void wait(int timeout_ms) {
    pollfd p{m_fds[0], POLLIN, 0};
    ::poll(&p, 1, timeout_ms);  // EINTR is a wake-up like any other
    char buf[256];
    while (::read(m_fds[0], buf, sizeof buf) > 0) {
    }
  }

 private:
  int m_fds[2] = {-1, -1};
  struct sigaction m_old_int {};
  struct sigaction m_old_term {};
};

// "compiled N/TOTAL (F failed), R configs/s, ETA Ts" on stderr: a line rewritten in place a few
// times a second on a terminal, otherwise one line on the first result and then every ~2 s.
class ProgressLine {
 public:
  explicit ProgressLine(size_t total)
      : m_total(total), m_tty(::isatty(STDERR_FILENO)), m_t0(Clock::now()) {}

  // How long the run loop may sleep before the next line is due.
  int interval_ms() const { return m_tty ? 250 : 2000; }

  void update(size_t done, size_t failed) {
    if (done == 0) return;
    const double now = seconds_since(m_t0);
    if (m_printed && now - m_last < interval_ms() / 1000.0) return;
    print(done, failed, now);
  }
  // Ends the in-place line so that what follows starts on its own.
  void finish(size_t done, size_t failed) {
    if (done > 0 && done != m_last_done) print(done, failed, seconds_since(m_t0));
    if (m_tty && m_printed) std::fputc('\n', stderr);
  }

 private:
  void print(size_t done, size_t failed, double now) {
    const double rate = now > 0 ? double(done) / now : 0;
    const std::string eta = rate > 0 ? fixed(double(m_total - done) / rate, 0) + "s" : "?";
    std::fprintf(stderr, "%scompiled %zu/%zu (%zu failed), %.1f configs/s, ETA %s%s",
                 m_tty ? "\r" : "", done, m_total, failed, rate, eta.c_str(),
                 m_tty ? "\033[K" : "\n");
    std::fflush(stderr);
    m_printed = true;
    m_last = now;
    m_last_done = done;
  }

  size_t m_total;
  bool m_tty;
  Clock::time_point m_t0;
  bool m_printed = false;
  double m_last = 0;
  size_t m_last_done = 0;
};

// What cmd_compile compiles: the template, target and problem, and one request per config.
struct CompilePlan {
  const KernelTemplate* tmpl = nullptr;
  std::string arch;
  Problem problem;
  SpaceReport space;
  std::vector<Params> configs;
  std::vector<CompileRequest> requests;
};

// The results of a run, by request index; a config that was not compiled has none.
struct CompileRun {
  std::vector<std::optional<CompileResult>> results;
  size_t done = 0;
  size_t failed = 0;
  int signal = 0;  // SIGINT or SIGTERM when interrupted
  double wall_s = 0;
};

// Plans the compile, or returns the exit code of a reported failure.
std::expected<CompilePlan, int> plan_compile(const Common& c, const CompileArgs& a,
                                             const TemplateRegistry& reg) {
  CompilePlan plan;
  plan.tmpl = reg.find(a.template_name);
  if (!plan.tmpl) {
    std::string message = "no template '" + a.template_name +
                          "' (have: " + joined(reg.all(), [](const auto& x) { return x->name(); }) +
                          ")";
    for (const auto& e : reg.errors()) message += "\n  skipped: " + e.message;
    return std::unexpected(report_failure(c.json, Exit::not_found, "not_found", message));
  }
  const KernelTemplate& t = *plan.tmpl;
  const Manifest& m = t.manifest;
  // Only the listed arches: sm_80a or sm_90aa would pass here and fail in NVRTC for every config.
  auto limits = DeviceLimits::for_arch(a.arch);
  if (!limits) return std::unexpected(usage(c.json, "--arch: " + limits.error().message));
  // The template's arch suffix applies as in lookups: --arch sm_90 compiles gemm_sm90 (wgmma,
  // arch_suffix: a) for sm_90a, the only target its instructions exist on. sm_90a is as given.
  plan.arch = a.arch == "sm_90a" ? a.arch : target_arch(m, limits->cc);
  // No --layout: the op's default (what lookups assume) when this template implements it.
  std::string layout = a.layout.empty() ? reg.default_layout(m.op) : a.layout;
  if (a.layout.empty() && !m.layouts.count(layout)) layout = m.default_layout;
  Problem& p = plan.problem;
  p = Problem{m.op, a.dtype.empty() ? m.dtypes.front() : a.dtype, "", layout, {}};
  p.out_dtype = a.out_dtype.empty() ? p.dtype : a.out_dtype;
  if (a.shape.empty()) {
    for (const auto& d : m.dims) p.dims.emplace_back(d, d == "n" ? (1 << 24) : 4096);
  } else {
    auto dims = parse_dims(a.shape);
    if (!dims) return std::unexpected(usage(c.json, "--shape: " + dims.error().message));
    p.dims = *dims;
  }
  // What is wrong with the problem, in the words a lookup uses, before the manifest's
  // expressions meet it (a zero dim read "launch.grid[0]: 0 is out of range").
  if (auto ok = validate_problem(p); !ok)
    return std::unexpected(
        report_failure(c.json, Exit::invalid, "invalid_problem", ok.error().message));
  if (std::find(m.dtypes.begin(), m.dtypes.end(), p.dtype) == m.dtypes.end())
    return std::unexpected(report_failure(
        c.json, Exit::usage, "usage",
        "--dtype: template " + m.name + " takes " + joined(m.dtypes) + ", not '" + p.dtype + "'"));
  // Whether the template implements the problem at all: the same failure (1) with or without
  // --config, which is a usage error only for what it says itself.
  if (auto ok = check_supported(t, p, *limits); !ok)
    return std::unexpected(failed(c.json, ok.error().message));
  if (!a.config.empty()) {
    auto params = parse_params(a.config);
    if (!params) return std::unexpected(usage(c.json, "--config: " + params.error().message));
    plan.configs.push_back(*params);
  } else {
    auto space = SearchSpace::build(t, p, *limits);
    if (!space) return std::unexpected(failed(c.json, space.error().message));
    plan.space = space->report();
    const auto& all = space->configs();
    const size_t want =
        a.all ? all.size() : std::min<size_t>(a.sample > 0 ? size_t(a.sample) : 8, all.size());
    for (size_t i = 0; i < want; ++i) plan.configs.push_back(all[i * all.size() / want]);
  }
  for (const auto& params : plan.configs) {
    auto inst = instantiate(t, p, *limits, params);
    // A --config that is not a whole config in the template's domains is the command line's
    // fault (docs/cli.md: usage); a sampled one that fails is a bug in the space, a failure.
    if (!inst && !a.config.empty())
      return std::unexpected(usage(c.json, "--config: " + inst.error().message));
    if (!inst) return std::unexpected(failed(c.json, inst.error().message));
    plan.requests.push_back({&t, inst->name_expression, plan.arch});
  }
  return plan;
}

// Compiles the plan's requests on the pool, at most one per thread in flight so that a stop
// leaves no queue behind, with a progress line. A SIGINT or SIGTERM stops it: no new compile
// starts and the ones in flight are abandoned (NVRTC cannot be cancelled and one compile can
// take seconds); the caller reports what finished and exits without joining the pool.
CompileRun run_compile(Compiler& compiler, const CompilePlan& plan) {
  struct Finished {
    std::mutex mutex;
    std::vector<std::pair<size_t, CompileResult>> results;
  };
  // Shared with the pool's callbacks, which may outlive this call when it is interrupted.
  auto finished = std::make_shared<Finished>();
  auto wake = std::make_shared<WakePipe>();
  const size_t total = plan.requests.size();
  CompileRun run;
  run.results.resize(total);
  ProgressLine progress(total);
  const auto t0 = Clock::now();
  size_t next = 0, in_flight = 0;
  const size_t window = std::max(1u, compiler.threads());
  while (next < total || in_flight > 0) {
    for (; next < total && in_flight < window; ++next, ++in_flight)
      compiler.submit(plan.requests[next], [finished, wake, i = next](CompileResult r) {
        {
          std::lock_guard lock(finished->mutex);
          finished->results.emplace_back(i, std::move(r));
        }
        wake->wake();
      });
    wake->wait(progress.interval_ms());
    std::vector<std::pair<size_t, CompileResult>> batch;
    {
      std::lock_guard lock(finished->mutex);
      batch.swap(finished->results);
    }
    for (auto& [i, r] : batch) {
      run.failed += !r.ok();
      run.results[i] = std::move(r);
      ++run.done;
      --in_flight;
    }
    if (g_signal_count.load() > 0) {
      run.signal = g_signal.load();
      break;
    }
    progress.update(run.done, run.failed);
  }
  progress.finish(run.done, run.failed);
  run.wall_s = seconds_since(t0);
  // Interrupted with compiles in flight: their callbacks still hold `finished` and `wake`; the
  // process exits before they run (see cmd_compile), so leaving them is safe.
  return run;
}

const char* signal_name(int signo) {
  return signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "a signal";
}

// The report: every compiled config in request order, failures' logs, and a summary. `error`,
// when not empty, is a failure after the compiles (writing the cubins): in the one --json
// document as "error" (with `exit_code`), else after the report on stderr.
void report_compile(const Common& c, const CompilePlan& plan, const CompileRun& run,
                    unsigned threads, const std::string& error, int exit_code) {
  const size_t total = plan.requests.size();
  Json rows = Json::array();
  TextTable table({"CONFIG", "STATUS", "TIME_S", "REGS", "SPILLS", "SMEM", "CUBIN_KB"});
  for (size_t i = 0; i < total; ++i) {
    if (!run.results[i]) continue;
    const CompileResult& r = *run.results[i];
    const std::string config = params_to_string(plan.configs[i]);
    rows.push_back({{"params", config},
                    {"status", r.ok() ? "ok" : "compile_error"},
                    {"compile_s", r.kernel.compile_ms / 1000},
                    {"registers", r.kernel.registers},
                    {"spill_bytes", r.kernel.spill_stores + r.kernel.spill_loads},
                    {"smem_bytes", r.kernel.smem_bytes},
                    {"cubin_bytes", r.kernel.cubin.size()},
                    {"log", r.ok() ? "" : r.log}});
    table.add({config, r.ok() ? "ok" : "compile_error", fixed(r.kernel.compile_ms / 1000, 2),
               std::to_string(r.kernel.registers),
               std::to_string(r.kernel.spill_stores + r.kernel.spill_loads),
               std::to_string(r.kernel.smem_bytes),
               fixed(double(r.kernel.cubin.size()) / 1024, 1)});
  }
  if (c.json) {
    Json doc = {{"template", plan.tmpl->manifest.name},
                {"arch", plan.arch},
                {"problem", plan.problem.key()},
                {"threads", threads},
                {"wall_s", run.wall_s},
                {"space_total", plan.space.total},
                {"space_valid", plan.space.valid},
                {"total", total},
                {"completed", run.done},
                {"interrupted", run.signal ? Json(signal_name(run.signal)) : Json(nullptr)},
                {"results", rows}};
    if (!error.empty())
      doc["error"] = {{"code", "failed"}, {"message", error}, {"exit_code", exit_code}};
    print_json(std::move(doc));
    return;
  }
  std::fputs(table.render().c_str(), stdout);
  for (size_t i = 0; i < total; ++i)
    if (run.results[i] && !run.results[i]->ok())
      std::printf("\n%s:\n%s\n", params_to_string(plan.configs[i]).c_str(),
                  run.results[i]->log.c_str());
  const double rate = run.wall_s > 0 ? double(run.done) / run.wall_s : 0.0;
  if (run.signal)
    std::printf(
        "interrupted by %s: %zu of %zu configs done (%zu failed), %.2f s wall on %u threads "
        "(%.1f kernels/s)\n",
        signal_name(run.signal), run.done, total, run.failed, run.wall_s, threads, rate);
  else
    std::printf("%zu compiled, %zu failed, %.2f s wall on %u threads (%.1f kernels/s)\n",
                run.done - run.failed, run.failed, run.wall_s, threads, rate);
  if (!error.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "ktune: failed: %s\n", error.c_str());
  }
}

// Makes --cubin-dir (with its parents) or says why it cannot be written into.
Result<void> prepare_cubin_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::io_error, dir + ": " + ec.message());
  if (!std::filesystem::is_directory(dir))
    return fail(ErrorCode::io_error, dir + ": not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fail(ErrorCode::io_error, dir + ": cannot write into it: " + std::strerror(errno));
  return {};
}

// Writes each compiled cubin to dir/<template>-<config>.cubin (the config's k=v list with ',' and
// '=' made file-name safe). Returns the files written, or an error naming the one that failed.
Result<size_t> write_cubins(const std::string& dir, const CompilePlan& plan,
                            const CompileRun& run) {
  size_t written = 0;
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    if (!run.results[i] || !run.results[i]->ok()) continue;
    std::string name = params_to_string(plan.configs[i]);
    std::replace(name.begin(), name.end(), ',', '_');
    std::replace(name.begin(), name.end(), '=', '-');
    const auto path = std::filesystem::path(dir) / (plan.tmpl->manifest.name + "-" + name + ".cubin");
    if (auto ok = write_file_atomic(path.string(), run.results[i]->kernel.cubin); !ok)
      return std::unexpected(ok.error());
    ++written;
  }
  return written;
}

}  // namespace

int cmd_compile(const Common& c, const CompileArgs& a) {
  const auto reg = TemplateRegistry::load(
      a.template_dirs.empty() ? std::vector<std::string>{builtin_template_dir()} : a.template_dirs);
  auto plan = plan_compile(c, a, reg);
  if (!plan) return plan.error();
  // Before anything compiles: a bad --cubin-dir costs nothing, and the run prints one document.
  if (!a.cubin_dir.empty())
    if (auto ok = prepare_cubin_dir(a.cubin_dir); !ok) return failed(c.json, ok.error().message);
  const size_t n = plan->requests.size();
  std::fprintf(stderr, "compiling %zu config%s of %s for %s (%s)%s...\n", n, n == 1 ? "" : "s",
               plan->tmpl->manifest.name.c_str(), plan->arch.c_str(),
               plan->problem.describe().c_str(),
               plan->space.total > 0 ? (", space " + fixed(plan->space.total, 0) + " -> " +
                                        fixed(plan->space.valid, 0) + " after constraints")
                                           .c_str()
                                     : "");
  Compiler compiler({.threads = a.threads});
  const CompileRun run = run_compile(compiler, *plan);
  // The cubins are written before the report, so that a failure to write one is part of it: one
  // --json document, every result still printed, and an interrupted run still exits 128 + the
  // signal.
  std::string write_error;
  if (!a.cubin_dir.empty()) {
    if (auto written = write_cubins(a.cubin_dir, *plan, run); written)
      std::fprintf(stderr, "wrote %zu cubin%s to %s\n", *written, *written == 1 ? "" : "s",
                   a.cubin_dir.c_str());
    else
      write_error = written.error().message;
  }
  const int exit_code = run.signal                           ? 128 + run.signal
                        : run.failed || !write_error.empty() ? int(Exit::failed)
                                                             : int(Exit::ok);
  report_compile(c, *plan, run, compiler.threads(), write_error, exit_code);
  if (run.signal) {
    // The compiles still in flight are abandoned: exit without joining the pool (the Compiler's
    // destructor would wait for them).
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }
  return exit_code;
}

}  // namespace ktune::cli
