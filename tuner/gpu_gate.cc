#include "tuner/gpu_gate.h"

#include <algorithm>

#include "config/log.h"

namespace ktune {

namespace {

double seconds(GpuGate::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

GpuGate::GpuGate(GpuPolicyOptions options, GpuMonitor& monitor, int ordinal, std::string pci_bus_id,
                 OwnPids own_pids)
    : m_options(options),
      m_monitor(monitor),
      m_ordinal(ordinal),
      m_pci_bus_id(std::move(pci_bus_id)),
      m_own_pids(std::move(own_pids)),
      m_policy(options),
      m_since(Clock::now()) {
  switch (m_options.mode) {
    case GpuPolicyMode::always:
      m_allowed = true;
      m_reason = "policy always";
      break;
    case GpuPolicyMode::never:
      m_reason = "policy never";
      break;
    case GpuPolicyMode::idle:
      m_reason = "waiting for the first sample";
      break;
  }
}

GpuGate::~GpuGate() {
  stop();
}

void GpuGate::start() {
  std::lock_guard lock(m_mutex);
  m_stopping = false;
  if (m_options.mode != GpuPolicyMode::idle || m_thread.joinable()) return;
  log(LogLevel::info, "gpu_gate_start",
      {{"gpu", m_ordinal},
       {"policy", to_string(m_options.mode)},
       {"monitor", m_monitor.describe()}});
  m_thread = std::thread([this] { run(); });
}

void GpuGate::stop() {
  std::thread thread;
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;
    thread = std::move(m_thread);
  }
  m_cv.notify_all();
  if (thread.joinable()) thread.join();
}

bool GpuGate::acquire(const std::function<bool()>& cancelled) {
  const auto poll = std::chrono::milliseconds(std::max(1, m_options.poll_ms));
  std::unique_lock lock(m_mutex);
  for (;;) {
    if (m_stopping) return false;
    if (cancelled) {
      lock.unlock();  // the caller's callback may take its own locks
      const bool cancel = cancelled();
      lock.lock();
      if (cancel) return false;
      if (m_stopping) return false;
    }
    if (m_allowed) return true;
    m_cv.wait_for(lock, poll);
  }
}

bool GpuGate::allowed() const {
  std::lock_guard lock(m_mutex);
  return m_allowed;
}

void GpuGate::sample_now() {
  if (m_options.mode != GpuPolicyMode::idle) return;  // the decision never changes
  std::lock_guard sample_lock(m_sample_mutex);
  const std::vector<std::uint32_t> own = m_own_pids ? m_own_pids() : std::vector<std::uint32_t>{};
  const Result<GpuActivity> sample = m_monitor.sample(m_ordinal, m_pci_bus_id);
  const Clock::time_point now = Clock::now();
  apply(m_policy.observe(sample, own, now), now);
}

void GpuGate::apply(GpuDecision decision, Clock::time_point now) {
  bool changed = false;
  {
    std::lock_guard lock(m_mutex);
    if (decision.allowed != m_allowed) {
      (m_allowed ? m_allowed_total : m_paused_total) += now - m_since;
      m_since = now;
      if (m_allowed) m_disturbance.fetch_add(1);
      m_allowed = decision.allowed;
      changed = true;
    }
    m_reason = decision.reason;
  }
  if (!changed) return;
  m_cv.notify_all();
  log(LogLevel::info, decision.allowed ? "gpu_resumed" : "gpu_paused",
      {{"gpu", m_ordinal}, {"reason", decision.reason}});
}

void GpuGate::run() {
  const auto poll = std::chrono::milliseconds(std::max(1, m_options.poll_ms));
  std::unique_lock lock(m_mutex);
  while (!m_stopping) {
    lock.unlock();
    sample_now();
    lock.lock();
    m_cv.wait_for(lock, poll, [this] { return m_stopping; });
  }
}

GateState GpuGate::state() const {
  std::lock_guard lock(m_mutex);
  return {m_allowed, m_reason, seconds(Clock::now() - m_since)};
}

GateTimes GpuGate::times() const {
  std::lock_guard lock(m_mutex);
  const Clock::duration current = Clock::now() - m_since;
  GateTimes t{seconds(m_allowed_total), seconds(m_paused_total)};
  (m_allowed ? t.allowed_s : t.paused_s) += seconds(current);
  return t;
}

}  // namespace ktune
