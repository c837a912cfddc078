// GpuGate: one tuning lane's permission to use its GPU, kept current by a sampling thread.
//
// The gate samples its GPU through a GpuMonitor every poll_ms, feeds IdlePolicy
// (tuner/gpu_policy.h, where the idle rule is written down) and publishes the decision. The lane
// calls acquire() before each trial, which blocks while the GPU is paused; it compares
// disturbance() before and after a trial to discard a measurement that foreign work may have
// disturbed. state() and times() feed `ktune status` and the metrics.
//
// Ownership: the gate borrows the monitor (which must outlive it) and owns its thread; the
// destructor stops it. Thread-safety: every method may be called from any thread; own_pids is
// called on the sampling thread (and in sample_now()'s caller), so it must be thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tuner/gpu_monitor.h"
#include "tuner/gpu_policy.h"

namespace ktune {

// The gate's current decision.
struct GateState {
  bool allowed = false;
  std::string reason;  // GpuDecision::reason; "waiting for the first sample" before one
  double since_s = 0;  // seconds since `allowed` last changed (or since the gate was made)
};

// Seconds spent allowed and paused since the gate was made, the current stretch included.
struct GateTimes {
  double allowed_s = 0;
  double paused_s = 0;
};

class GpuGate {
 public:
  using Clock = std::chrono::steady_clock;
  // ktune's own worker pids on this GPU (empty when the lane has no worker).
  using OwnPids = std::function<std::vector<std::uint32_t>()>;

  // In mode `always` the gate is allowed from the start and never samples; in `never` it is
  // paused for good. In `idle` it is paused until samples have been quiet for settle_s.
  GpuGate(GpuPolicyOptions options, GpuMonitor& monitor, int ordinal, std::string pci_bus_id,
          OwnPids own_pids);
  ~GpuGate();
  GpuGate(const GpuGate&) = delete;
  GpuGate& operator=(const GpuGate&) = delete;

  // Starts the sampling thread (mode idle only; a no-op when it runs). After stop(), start()
  // makes the gate usable again.
  void start();
  // Stops sampling and wakes every acquire(), which then returns false. Returns at once (the
  // thread waits on a condition variable, never in a sleep); idempotent.
  void stop();

  // Blocks until tuning is allowed (true), or stop() is called or `cancelled` returns true
  // (false). `cancelled` is polled at least every poll_ms, outside the gate's lock.
  // REQUIRES (mode idle): start(), or someone calling sample_now(); nothing else opens the gate.
  bool acquire(const std::function<bool()>& cancelled = {});
  // The current decision, without blocking.
  bool allowed() const;

  // Takes one sample now on the caller's thread and applies it. The sampling thread calls this
  // each period; a lane calls it right after a trial so disturbance() reflects the GPU as the
  // trial ended, and tests call it to drive the gate without the thread.
  void sample_now();

  // How many times the decision went from allowed to paused (foreign work appeared, or the GPU
  // could no longer be observed). A trial during which this moved must be measured again.
  std::uint64_t disturbance() const { return m_disturbance.load(); }

  GateState state() const;
  GateTimes times() const;
  int ordinal() const { return m_ordinal; }
  const GpuPolicyOptions& options() const { return m_options; }

 private:
  void run();
  void apply(GpuDecision decision, Clock::time_point now);

  const GpuPolicyOptions m_options;
  GpuMonitor& m_monitor;
  const int m_ordinal;
  const std::string m_pci_bus_id;
  const OwnPids m_own_pids;

  // Held across one whole sample (monitor, policy, apply) so samples apply in the order taken.
  std::mutex m_sample_mutex;
  IdlePolicy m_policy;  // guarded by m_sample_mutex

  mutable std::mutex m_mutex;  // guards everything below
  std::condition_variable m_cv;
  bool m_stopping = false;
  bool m_allowed = false;
  std::string m_reason;
  Clock::time_point m_since;          // when m_allowed last changed
  Clock::duration m_allowed_total{};  // closed stretches only
  Clock::duration m_paused_total{};   // closed stretches only
  std::atomic<std::uint64_t> m_disturbance{0};
  std::thread m_thread;
};

}  // namespace ktune
