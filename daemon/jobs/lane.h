// Lane: one GPU's tuning loop — a thread, the GPU's worker process (TrialRunner) and its GpuGate.
//
// The lane claims jobs of its device class from the JobQueue one at a time, runs each as a
// TuningJob that reuses trials already measured (resume), asks the gate before every measurement
// (pausing while foreign work holds the GPU) and retakes measurements the gate saw disturbed,
// and commits the winner through the Catalog. Thread-safe: status() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "daemon/catalog.h"
#include "daemon/jobs/claims.h"
#include "daemon/jobs/queue.h"
#include "daemon/jobs/scheduler.h"
#include "tuner/gpu_gate.h"
#include "tuner/worker_process.h"

namespace ktune {

class Lane {
 public:
  // `monitor` tells the lane's GpuGate what runs on the GPU; it outlives the lane.
  Lane(TuningDeps deps, GpuMonitor& monitor, GpuInfo gpu);
  ~Lane();

  void start();
  // Asks the loop to end at the next trial (a running job goes back to the queue); returns at
  // once. The scheduler asks every lane before it stops the queue: a lane that saw the queue
  // stopped before its own stop would take it for a client's cancel.
  void request_stop();
  // request_stop(), then waits for the loop to end.
  void stop();
  LaneStatus status() const;
  const GpuInfo& gpu() const { return m_gpu; }

 private:
  void loop();
  void run_job(const JobRecord& job);
  // Asks the claims (the fleet) whether this node tunes `job` now; null when the job was
  // deferred (another node tunes its key) or ended (the fleet has its winner).
  std::unique_ptr<Claim> claim_key(const JobRecord& job);
  // Offers the result to the fleet under `claim`, commits it and ends the job.
  void commit_result(const JobRecord& job, const WinnerRecord& winner, Claim& claim);
  // Ends the job; a key whose job failed may become a job from misses again after a backoff.
  void end_job(const JobRecord& job, JobState state, const std::string& message);
  std::vector<Params> neighbour_seeds(const Problem& problem) const;
  enum class State { idle, tuning, paused };
  // Moves the lane to `state` (with `job` when it starts one; idle clears it).
  void set_state(State state, const JobRecord* job);
  // Adds the time since the last call to the bucket of the current state.
  void account_locked() const;

  TuningDeps m_deps;
  GpuInfo m_gpu;
  TrialRunner m_runner;
  GpuGate m_gate;
  std::thread m_thread;
  std::atomic<bool> m_stop{false};

  mutable std::mutex m_mutex;
  State m_state = State::idle;
  JobRecord m_job;  // id empty when idle
  mutable std::chrono::steady_clock::time_point m_last_account = std::chrono::steady_clock::now();
  mutable double m_seconds_tuning = 0, m_seconds_paused = 0, m_seconds_idle = 0;
};

}  // namespace ktune
