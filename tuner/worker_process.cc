#include "tuner/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "config/log.h"

namespace ktune {

std::string default_worker_binary() {
  if (const char* w = std::getenv("KTUNE_WORKER"); w && *w) return w;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (const fs::path& p : {exe_dir / "ktune-worker", exe_dir / ".." / "tuner" / "ktune-worker",
                            exe_dir / ".." / ".." / "tuner" / "ktune-worker"})
    if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
  return "ktune-worker";
}

namespace {

// The fd the worker reads its end of the socket pair from (`--fd 3`).
constexpr int k_child_fd = 3;

// Starts `argv[0]` with `child_end` as its fd 3 and every other descriptor of ours closed: ours
// are CLOEXEC, but not every library's (Asio's listening sockets are not), and a worker that
// outlives a killed daemon must not hold its listening socket open. posix_spawn, not fork: the
// parent is multithreaded, and a forked child of a multithreaded process may not allocate (or take
// any lock) before exec. Everything the child needs (argv, the file actions) is built here, before
// the spawn.
Result<pid_t> spawn_worker(std::vector<std::string> args, int child_end) {
  // dup2 onto fd 3 clears CLOEXEC on the new descriptor, but when the child's end already is
  // fd 3, dup2(3, 3) does nothing and exec would close it. glibc's adddup2 clears the flag in
  // that case (as POSIX.1-2024 requires); POSIX.1-2017 leaves it unspecified, so move it off 3.
  int moved = -1;
  if (child_end == k_child_fd) {
    moved = ::fcntl(child_end, F_DUPFD_CLOEXEC, k_child_fd + 1);
    if (moved < 0) return fail(ErrorCode::unavailable, "fcntl(F_DUPFD_CLOEXEC) failed");
    child_end = moved;
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  posix_spawn_file_actions_t actions;
  int rc = ::posix_spawn_file_actions_init(&actions);
  if (rc == 0) {
    posix_spawnattr_t attr;
    rc = ::posix_spawnattr_init(&attr);
    if (rc == 0) {
      // The worker starts with no signal blocked, whatever the spawning thread blocks.
      sigset_t none;
      sigemptyset(&none);
      rc = ::posix_spawn_file_actions_adddup2(&actions, child_end, k_child_fd);
      if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&actions, k_child_fd + 1);
      if (rc == 0) rc = ::posix_spawnattr_setsigmask(&attr, &none);
      if (rc == 0) rc = ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
      if (rc == 0) rc = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ);
      ::posix_spawnattr_destroy(&attr);
    }
    ::posix_spawn_file_actions_destroy(&actions);
  }
  if (moved >= 0) ::close(moved);
  if (rc != 0)
    return fail(ErrorCode::unavailable,
                "cannot start ktune-worker (" + args[0] + "): " + std::strerror(rc));
  return pid;
}

}  // namespace

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::spawn(
    const std::string& binary, int ordinal, int hello_timeout_ms,
    const std::function<void(pid_t)>& on_spawned) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return fail(ErrorCode::unavailable, "socketpair failed");
  auto pid = spawn_worker(
      {binary, "--fd", std::to_string(k_child_fd), "--device", std::to_string(ordinal)}, fds[1]);
  ::close(fds[1]);
  if (!pid) {
    ::close(fds[0]);
    return std::unexpected(pid.error());
  }
  auto w = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  w->m_pid = *pid;
  if (on_spawned) on_spawned(*pid);
  w->m_fd = fds[0];
  auto hello = w->call({{"op", "hello"}}, {}, hello_timeout_ms);
  if (!hello) {
    return fail(ErrorCode::unavailable,
                "ktune-worker (" + binary + ") did not start: " + hello.error().message +
                    (w->m_exit_status.empty() ? "" : " (" + w->m_exit_status + ")"));
  }
  if (!hello->header.value("ok", false))
    return fail(ErrorCode::unavailable,
                "ktune-worker: " + hello->header.value("error", std::string("hello failed")));
  // A worker binary of another build would misread the requests (argument kinds, clusters).
  if (const int v = hello->header.value("protocol", 0); v != k_worker_protocol_version)
    return fail(ErrorCode::unavailable, "ktune-worker (" + binary + ") speaks protocol " +
                                            std::to_string(v) + "; this build needs " +
                                            std::to_string(k_worker_protocol_version));
  w->m_hello = hello->header;
  return w;
}

WorkerProcess::~WorkerProcess() {
  if (m_pid > 0) {
    (void)write_worker_frame(m_fd, {{"op", "shutdown"}});
    for (int i = 0; i < 50 && m_pid > 0; ++i) {
      reap(false);
      if (m_pid > 0) ::usleep(10'000);
    }
    kill();
  }
  if (m_fd >= 0) ::close(m_fd);
}

void WorkerProcess::kill() {
  if (m_pid <= 0) return;
  ::kill(m_pid, SIGKILL);
  reap(true);
}

void WorkerProcess::reap(bool block) {
  if (m_pid <= 0) return;
  int status = 0;
  const pid_t r = ::waitpid(m_pid, &status, block ? 0 : WNOHANG);
  if (r != m_pid) return;
  m_exit_status = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                    : "signal " + std::to_string(WTERMSIG(status));
  m_pid = -1;
}

Result<WorkerFrame> WorkerProcess::call(const WorkerJson& header, std::string_view blob,
                                        int timeout_ms) {
  if (m_pid <= 0)
    return fail(ErrorCode::unavailable, "worker is not running (" + m_exit_status + ")");
  if (auto ok = write_worker_frame(m_fd, header, blob); !ok) {
    kill();
    return std::unexpected(ok.error());
  }
  auto reply = read_worker_frame(m_fd, timeout_ms);
  if (!reply) {
    if (reply.error().code == ErrorCode::timeout) {
      kill();  // a spinning kernel: SIGKILL reaps it and frees the GPU
      return fail(ErrorCode::timeout,
                  "worker exceeded " + std::to_string(timeout_ms) + " ms; killed");
    }
    // EOF: it died (or exited after a sticky error). Reap it to learn how.
    for (int i = 0; i < 100 && m_pid > 0; ++i) {
      reap(false);
      if (m_pid > 0) ::usleep(10'000);
    }
    kill();
    return fail(ErrorCode::unavailable, "worker died (" + m_exit_status + ")");
  }
  return reply;
}

// ---- TrialRunner ---------------------------------------------------------------------------

Result<WorkerJson> TrialRunner::start() {
  if (m_worker && m_worker->alive()) return m_hello;
  auto w = WorkerProcess::spawn(m_options.worker_binary, m_options.ordinal, 60'000,
                                [this](pid_t pid) { m_worker_pid.store(int(pid)); });
  if (!w) {
    m_worker_pid.store(0);
    return std::unexpected(w.error());
  }
  m_worker = std::move(*w);
  m_hello = m_worker->hello();
  m_worker_pid.store(int(m_worker->pid()));
  return m_hello;
}

Result<void> TrialRunner::respawn() {
  ++m_respawns;
  if (++m_respawn_budget_used > m_options.max_respawns)
    return fail(ErrorCode::unavailable,
                "worker replaced " + std::to_string(m_options.max_respawns) + " times; giving up");
  if (m_worker) m_worker->kill();
  m_worker.reset();
  m_worker_pid.store(0);
  if (auto ok = start(); !ok) return std::unexpected(ok.error());
  if (m_setup) {
    auto r = m_worker->call(*m_setup, {}, m_options.setup_timeout_ms);
    if (!r || !r->header.value("ok", false))
      return fail(ErrorCode::unavailable, "setup after respawn failed");
  }
  if (m_reference) {
    auto r = m_worker->call(m_reference->first, m_reference->second, m_options.setup_timeout_ms);
    if (!r || !r->header.value("ok", false))
      return fail(ErrorCode::unavailable, "reference after respawn failed");
  }
  log(LogLevel::info, "worker_respawned", {{"pid", m_worker->pid()}, {"respawns", m_respawns}});
  return {};
}

Result<WorkerFrame> TrialRunner::call(const WorkerJson& header, std::string_view blob,
                                      int timeout_ms) {
  if (auto ok = start(); !ok) return std::unexpected(ok.error());
  auto r = m_worker->call(header, blob, timeout_ms);
  if (!r) return r;
  if (!r->header.value("ok", false))
    return fail(ErrorCode::internal,
                "worker: " + r->header.value("error", std::string("request failed")));
  return r;
}

Result<WorkerJson> TrialRunner::setup(const std::vector<ArgValue>& args, unsigned seed) {
  WorkerJson req = {{"op", "setup"}, {"seed", seed}, {"args", WorkerJson::array()}};
  for (const auto& a : args) req["args"].push_back(to_json(a));
  m_setup = req;
  m_reference.reset();
  auto r = call(req, {}, m_options.setup_timeout_ms);
  if (!r) return std::unexpected(r.error());
  return r->header;
}

Result<WorkerJson> TrialRunner::reference(const WorkerJson& header, std::string cubin) {
  WorkerJson req = header;
  req["op"] = "reference";
  auto r = call(req, cubin, m_options.setup_timeout_ms);
  if (!r) return std::unexpected(r.error());
  m_reference = std::make_pair(req, std::move(cubin));
  return r->header;
}

TrialResult TrialRunner::run(const TrialRequest& request, const std::string& cubin) {
  TrialResult result;
  result.id = request.id;
  if (auto ok = start(); !ok) {
    result.outcome = Outcome::crash;
    result.message = ok.error().message;
    return result;
  }
  auto reply = m_worker->call(to_json(request), cubin, m_options.trial_timeout_ms);
  if (!reply) {
    result.outcome = reply.error().code == ErrorCode::timeout ? Outcome::timeout : Outcome::crash;
    result.message = reply.error().message;
  } else if (!reply->header.value("ok", false)) {
    result.outcome = Outcome::crash;
    result.message = "worker: " + reply->header.value("error", std::string("trial failed"));
  } else if (auto parsed = trial_result_from_json(reply->header); !parsed) {
    result.outcome = Outcome::crash;
    result.message = parsed.error().message;
  } else {
    result = *parsed;
    m_telemetry = result.telemetry;
  }
  // A crash, a kill or a poisoned context: replace the worker before the next trial.
  const bool poisoned = reply && reply->header.value("poisoned", false);
  if (result.outcome == Outcome::crash || result.outcome == Outcome::timeout || poisoned ||
      !m_worker->alive()) {
    if (poisoned || m_worker->alive()) m_worker->kill();
    if (auto ok = respawn(); !ok) result.message += "; " + ok.error().message;
  }
  return result;
}

Result<std::vector<std::pair<std::uint64_t, Timing>>> TrialRunner::retime(
    const std::vector<std::uint64_t>& ids, int rounds, const TimingOptions& timing,
    const WorkerJson& cublas_problem) {
  WorkerJson req = {
      {"op", "retime"}, {"ids", ids}, {"rounds", rounds}, {"timing", to_json(timing)}};
  if (!cublas_problem.is_null() && !cublas_problem.empty()) req["cublas"] = cublas_problem;
  auto r = call(req, {}, m_options.setup_timeout_ms);
  if (!r) return std::unexpected(r.error());
  std::vector<std::pair<std::uint64_t, Timing>> out;
  for (const auto& t : r->header.at("times")) {
    const std::uint64_t id = t.at("id").is_string() ? ~0ull : t.at("id").get<std::uint64_t>();
    out.emplace_back(id, timing_from_json(t));
  }
  m_telemetry = telemetry_from_json(r->header.value("telemetry", WorkerJson::object()));
  return out;
}

Result<std::pair<int, std::string>> TrialRunner::occupancy(const std::string& lowered_name,
                                                           const LaunchGeometry& launch,
                                                           const std::string& cubin) {
  auto r = call({{"op", "occupancy"}, {"lowered_name", lowered_name}, {"launch", to_json(launch)}},
                cubin, m_options.trial_timeout_ms);
  if (!r) {
    if (!m_worker || !m_worker->alive())
      if (auto ok = respawn(); !ok) return std::unexpected(ok.error());
    return std::unexpected(r.error());
  }
  return std::make_pair(r->header.value("max_active_clusters", 0),
                        r->header.value("message", std::string()));
}

Result<Timing> TrialRunner::time_cublas(const WorkerJson& problem, const TimingOptions& timing) {
  auto r = call({{"op", "time_cublas"}, {"problem", problem}, {"timing", to_json(timing)}}, {},
                m_options.setup_timeout_ms);
  if (!r) return std::unexpected(r.error());
  m_telemetry = telemetry_from_json(r->header.value("telemetry", WorkerJson::object()));
  return timing_from_json(r->header.at("timing"));
}

Result<std::pair<Timing, double>> TrialRunner::time_copy(std::size_t bytes,
                                                         const TimingOptions& timing) {
  auto r = call({{"op", "time_copy"}, {"bytes", bytes}, {"timing", to_json(timing)}}, {},
                m_options.setup_timeout_ms);
  if (!r) return std::unexpected(r.error());
  m_telemetry = telemetry_from_json(r->header.value("telemetry", WorkerJson::object()));
  return std::make_pair(timing_from_json(r->header.at("timing")),
                        r->header.at("gbps").get<double>());
}

}  // namespace ktune
