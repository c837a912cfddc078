// GPU policy: when a tuning lane may use its GPU (tuning.gpu_policy and the idle_* keys).
//
// A fleet node's GPUs belong to production work; ktune tunes in what is left. IdlePolicy is the
// decision alone: a pure state machine fed one GpuMonitor sample at a time with the time it was
// taken, so every rule is tested without threads or a clock. GpuGate (tuner/gpu_gate.h) runs it
// on a sampling thread per lane.
//
// The idle rule, applied to each sample:
//   1. a process that is not one of ktune's own workers holds a compute context -> busy;
//   2. else, when one of ktune's workers is on the GPU -> quiet (utilization is ignored: it is
//      ours, and pausing for it would stop every job at its first trial);
//   3. else (nobody visible) -> quiet only when utilization <= idle_threshold_percent, which
//      catches work NVML cannot attribute to a pid (another container, MPS, graphics);
//   4. a sampling error (no NVML, the GPU fell off the bus) -> busy: never tune blind.
// Tuning is allowed once the samples have been quiet for idle_settle_seconds without a break;
// any busy sample restarts the settle time.
//
// IdlePolicy is not thread-safe (GpuGate serializes it); the free functions are.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "config/config.h"
#include "config/error.h"
#include "tuner/gpu_monitor.h"

namespace ktune {

enum class GpuPolicyMode {
  idle,    // tune only while the GPU is idle of foreign work (the rule above)
  always,  // tune whenever there is a job; the GPU is ktune's
  never,   // jobs queue but nothing runs on the GPU
};

// "idle" | "always" | "never"; anything else is ErrorCode::invalid_argument.
Result<GpuPolicyMode> parse_gpu_policy_mode(std::string_view text);
std::string_view to_string(GpuPolicyMode mode);

struct GpuPolicyOptions {
  GpuPolicyMode mode = GpuPolicyMode::idle;
  // Quiet means utilization at or under this percent (when no process is visible). Default 5.
  double threshold_percent = 5;
  // Seconds of unbroken quiet before tuning starts or resumes. Default 5.
  double settle_s = 5;
  // How often GpuGate samples the GPU, in ms; also how often acquire() re-checks cancel.
  // Default 200.
  int poll_ms = 200;
};

// The options from tuning.gpu_policy, tuning.idle_threshold_percent, tuning.idle_settle_seconds
// and tuning.idle_poll_ms.
Result<GpuPolicyOptions> gpu_policy_options(const DaemonConfig& config);

// What the policy says after a sample. `reason` is for people (status, logs): "foreign process
// 1234 on GPU", "utilization 37% > 5%", "settling: idle for 1.2 s of 5 s", "policy never",
// "NVML unavailable: ...", "idle: utilization 0% <= 5%".
struct GpuDecision {
  bool allowed = false;
  std::string reason;
};

class IdlePolicy {
 public:
  using Clock = std::chrono::steady_clock;

  explicit IdlePolicy(GpuPolicyOptions options) : m_options(options) {}

  // Feeds the sample taken at `now` (or the error that replaced it). `own_pids` are ktune's
  // worker processes on this GPU. REQUIRES: `now` does not go back between calls.
  GpuDecision observe(const Result<GpuActivity>& sample, std::span<const std::uint32_t> own_pids,
                      Clock::time_point now);

 private:
  GpuPolicyOptions m_options;
  // Start of the current run of quiet samples; empty after a busy one.
  std::optional<Clock::time_point> m_quiet_since;
};

}  // namespace ktune
