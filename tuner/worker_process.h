// WorkerProcess and TrialRunner: the parent's side of ktune-worker.
//
// WorkerProcess spawns one ktune-worker on a socketpair and exchanges frames with a deadline; a
// worker that misses the deadline is SIGKILLed, one that closes the pipe is reaped. Nothing the
// worker (or the kernel it runs) does can take the parent down.
//
// TrialRunner keeps a worker for one problem: it remembers the setup and reference requests so a
// replacement worker (after a crash or a timeout) is brought back to the same state, classifies
// every failure as a trial Outcome, and respawns. Not thread-safe: one runner per GPU lane.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tuner/worker_protocol.h"

namespace ktune {

class WorkerProcess {
 public:
  // Starts `binary --fd N --device ordinal` and checks its hello.
  // `on_spawned` hears the pid before the hello (the worker creates its CUDA context then, and a
  // GPU monitor must already know it as ours).
  static Result<std::unique_ptr<WorkerProcess>> spawn(
      const std::string& binary, int ordinal, int hello_timeout_ms = 60'000,
      const std::function<void(pid_t)>& on_spawned = {});
  ~WorkerProcess();

  // Sends one request and waits up to timeout_ms for the reply. ErrorCode::timeout: the worker
  // was killed. ErrorCode::unavailable: it exited (see exit_status()).
  Result<WorkerFrame> call(const WorkerJson& header, std::string_view blob, int timeout_ms);

  bool alive() const { return m_pid > 0; }
  pid_t pid() const { return m_pid; }
  // "exit 3", "signal 9", "" while alive.
  const std::string& exit_status() const { return m_exit_status; }
  const WorkerJson& hello() const { return m_hello; }
  void kill();

 private:
  void reap(bool block);

  pid_t m_pid = -1;
  int m_fd = -1;
  std::string m_exit_status;
  WorkerJson m_hello;
};

// Where ktune-worker lives: $KTUNE_WORKER, else beside the running executable, else the build
// tree's tuner/ directory.
std::string default_worker_binary();

struct RunnerOptions {
  std::string worker_binary = default_worker_binary();
  int ordinal = 0;
  int trial_timeout_ms = 20'000;   // one candidate: load, verify, time
  int setup_timeout_ms = 120'000;  // allocation and input fill, reference
  int max_respawns = 50;           // between reset_respawn_budget() calls; then the job fails
};

class TrialRunner {
 public:
  explicit TrialRunner(RunnerOptions options) : m_options(std::move(options)) {}

  // Starts a worker if there is none and returns its hello.
  Result<WorkerJson> start();
  // Allocates and fills the arguments (replayed after every respawn).
  Result<WorkerJson> setup(const std::vector<ArgValue>& args, unsigned seed);
  // Runs the reference: a kernel (cubin + Instance) or cuBLAS
  // ({"kind":"cublas_gemm","problem":...}).
  Result<WorkerJson> reference(const WorkerJson& header, std::string cubin = {});

  // Verifies and times one candidate. Crashes and timeouts come back as outcomes, and the worker
  // is replaced before this returns.
  TrialResult run(const TrialRequest& request, const std::string& cubin);

  // Interleaved re-timing of candidates already run on the current worker (and cuBLAS when
  // `cublas_problem` is given, reported under id ~0).
  Result<std::vector<std::pair<std::uint64_t, Timing>>> retime(
      const std::vector<std::uint64_t>& ids, int rounds, const TimingOptions& timing,
      const WorkerJson& cublas_problem = {});
  Result<Timing> time_cublas(const WorkerJson& problem, const TimingOptions& timing);
  // How many clusters (blocks, for a cluster of one) of `launch` the compiled kernel can keep
  // resident at once: the value of a manifest's max_active_clusters. 0 with the reason when
  // none fits or the driver cannot say. A worker that dies on the way is replaced.
  Result<std::pair<int, std::string>> occupancy(const std::string& lowered_name,
                                                const LaunchGeometry& launch,
                                                const std::string& cubin);
  // Device-to-device copy of `bytes`: the memory ceiling, as GB/s (read + write).
  Result<std::pair<Timing, double>> time_copy(std::size_t bytes, const TimingOptions& timing);

  // Workers replaced so far over the runner's life (never reset: it also tells workers apart).
  int respawns() const { return m_respawns; }
  // Starts a new allowance of max_respawns (a long-lived lane calls it before each job).
  void reset_respawn_budget() { m_respawn_budget_used = 0; }
  // The current worker's pid, 0 when none runs. Thread-safe (for a GPU monitor's own-pid list).
  int worker_pid() const { return m_worker_pid.load(); }
  GpuTelemetry last_telemetry() const { return m_telemetry; }
  const WorkerJson& hello() const { return m_hello; }

 private:
  Result<WorkerFrame> call(const WorkerJson& header, std::string_view blob, int timeout_ms);
  Result<void> respawn();

  RunnerOptions m_options;
  std::unique_ptr<WorkerProcess> m_worker;
  WorkerJson m_hello;
  std::optional<WorkerJson> m_setup;
  std::optional<std::pair<WorkerJson, std::string>> m_reference;
  int m_respawns = 0;
  int m_respawn_budget_used = 0;
  std::atomic<int> m_worker_pid{0};
  GpuTelemetry m_telemetry;
};

}  // namespace ktune
