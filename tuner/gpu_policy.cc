#include "tuner/gpu_policy.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "config/text.h"

namespace ktune {

namespace {

// printf into a std::string (GCC 12 has no std::format); reasons are short.
[[gnu::format(printf, 1, 2)]] std::string printf_string(const char* fmt, ...) {
  char buf[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// One sample classified by rules 1-4 (see the header): quiet or busy, and why.
struct Verdict {
  bool quiet = false;
  std::string reason;
};

Verdict classify(const Result<GpuActivity>& sample, std::span<const std::uint32_t> own_pids,
                 double threshold_percent) {
  if (!sample) return {false, "NVML unavailable: " + sample.error().message};
  std::vector<std::uint32_t> foreign;
  bool own_on_gpu = false;
  for (std::uint32_t pid : sample->compute_pids) {
    if (std::find(own_pids.begin(), own_pids.end(), pid) != own_pids.end()) {
      own_on_gpu = true;
    } else if (std::find(foreign.begin(), foreign.end(), pid) == foreign.end()) {
      foreign.push_back(pid);
    }
  }
  if (!foreign.empty()) {
    std::sort(foreign.begin(), foreign.end());
    const std::string list = joined(foreign, [](auto pid) { return std::to_string(pid); });
    return {false,
            (foreign.size() > 1 ? "foreign processes " : "foreign process ") + list + " on GPU"};
  }
  if (own_on_gpu) return {true, "idle: only ktune's workers on GPU"};
  const int utilization = sample->utilization_percent;
  if (utilization > threshold_percent)
    return {false, printf_string("utilization %d%% > %g%%", utilization, threshold_percent)};
  return {true, printf_string("idle: utilization %d%% <= %g%%", utilization, threshold_percent)};
}

}  // namespace

Result<GpuPolicyMode> parse_gpu_policy_mode(std::string_view text) {
  for (GpuPolicyMode mode : {GpuPolicyMode::idle, GpuPolicyMode::always, GpuPolicyMode::never})
    if (text == to_string(mode)) return mode;
  return fail(ErrorCode::invalid_argument,
              "unknown gpu_policy '" + std::string(text) + "' (idle, always, never)");
}

std::string_view to_string(GpuPolicyMode mode) {
  switch (mode) {
    case GpuPolicyMode::idle:
      return "idle";
    case GpuPolicyMode::always:
      return "always";
    case GpuPolicyMode::never:
      return "never";
  }
  return "unknown";
}

Result<GpuPolicyOptions> gpu_policy_options(const DaemonConfig& config) {
  auto mode = parse_gpu_policy_mode(config.gpu_policy);
  if (!mode) return std::unexpected(mode.error());
  return GpuPolicyOptions{*mode, config.idle_threshold_percent, config.idle_settle_seconds,
                          config.idle_poll_ms};
}

GpuDecision IdlePolicy::observe(const Result<GpuActivity>& sample,
                                std::span<const std::uint32_t> own_pids, Clock::time_point now) {
  if (m_options.mode == GpuPolicyMode::always) return {true, "policy always"};
  if (m_options.mode == GpuPolicyMode::never) return {false, "policy never"};

  Verdict verdict = classify(sample, own_pids, m_options.threshold_percent);
  if (!verdict.quiet) {
    m_quiet_since.reset();
    return {false, std::move(verdict.reason)};
  }
  if (!m_quiet_since) m_quiet_since = now;
  const double quiet_s = std::chrono::duration<double>(now - *m_quiet_since).count();
  if (quiet_s < m_options.settle_s)
    return {false, printf_string("settling: idle for %.1f s of %g s", quiet_s, m_options.settle_s)};
  return {true, std::move(verdict.reason)};
}

}  // namespace ktune
