// Scheduler: background tuning — one lane per GPU, each running one job at a time.
//
// A Lane owns a thread, a TrialRunner (its ktune-worker process: crash and hang isolation) and a
// GpuGate (tuner/gpu_policy.h) that decides when the GPU is ours under tuning.gpu_policy. Lanes
// share the daemon's NVRTC Compiler (one pool). A lane claims the highest-priority queued job of
// its device class, seeds it from the nearest tuned shapes and the heuristics, runs a TuningJob
// (resuming trials already measured), pauses between trials while foreign work is on the GPU,
// and commits the winner through the Catalog. The scheduler also turns missed lookups into jobs
// (tuning.on_miss) once their expected worth passes tuning.miss_threshold_us, and every second
// folds the misses counted elsewhere into the tracker (MissTracker::fold).
// Thread-safe; stop() ends every lane at its next trial (their jobs resume at the next start).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/protocol.h"
#include "daemon/catalog.h"
#include "daemon/jobs/queue.h"
#include "daemon/metrics.h"
#include "daemon/misses.h"
#include "daemon/node.h"
#include "tuner/compiler.h"

namespace ktune {

class GpuMonitor;
class Lane;
class WorkClaims;

// What background tuning works with; owned by the daemon, outliving the scheduler and its lanes.
struct TuningDeps {
  const DaemonConfig& config;
  const TemplateSet& templates;  // each job runs with the snapshot it started with
  Store& store;
  Catalog& catalog;
  JobQueue& jobs;
  MissTracker& misses;
  const NodeIdentity& node;
  Metrics& metrics;
  Compiler& compiler;
  // Asked before each job so a fleet tunes each key once (daemon/jobs/claims.h); null: no
  // fleet, every key is this node's to tune.
  WorkClaims* claims = nullptr;
};

struct LaneStatus {
  int ordinal = 0;
  std::string device;  // device class id
  std::string state;   // idle | tuning | paused | stopped
  std::string job;     // id of the job it runs ("" when idle)
  std::string problem;
  int trials = 0;
  int budget_trials = 0;
  double best_us = 0;
  std::string reason;  // why paused (or the GPU policy's view when idle)
  int worker_pid = 0;
  double seconds_tuning = 0, seconds_paused = 0, seconds_idle = 0;
  // The GPU gate's view, whether or not a job runs.
  bool gpu_allowed = false;
  double gpu_allowed_s = 0, gpu_paused_s = 0;
  std::uint64_t disturbances = 0;
};
protocol::Json to_json(const LaneStatus& lane);

class Scheduler {
 public:
  explicit Scheduler(TuningDeps deps);
  ~Scheduler();

  // Starts one lane per GPU of the node (none without GPUs) and the miss promoter.
  Result<void> start();
  // Stops every lane at its next trial; running jobs go back to the queue.
  void stop();

  bool can_tune(const std::string& device_id) const;
  std::vector<LaneStatus> lanes() const;
  // Prometheus text: lane state seconds, trials/s inputs (per lane), miss promotions.
  std::string metrics_text() const;
  // Turns misses worth more than the threshold into jobs (called periodically; public for tests).
  void promote_misses();

 private:
  void promoter_loop();

  TuningDeps m_deps;
  std::unique_ptr<GpuMonitor> m_monitor;
  std::vector<std::unique_ptr<Lane>> m_lanes;
  std::thread m_promoter;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_stopping = false;
  std::atomic<std::uint64_t> m_promoted{0};
};

}  // namespace ktune
