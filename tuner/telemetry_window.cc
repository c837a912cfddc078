#include "tuner/telemetry_window.h"

#include <algorithm>

namespace ktune {

TelemetryWindow::TelemetryWindow(Source source, std::chrono::microseconds period)
    : m_source(std::move(source)), m_period(period) {
  if (m_source) m_thread = std::thread([this] { run(); });
}

TelemetryWindow::~TelemetryWindow() {
  {
    std::lock_guard lock(m_mu);
    m_stop = true;
  }
  m_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void TelemetryWindow::run() {
  std::unique_lock lock(m_mu);
  while (!m_stop) {
    lock.unlock();
    const Clock::time_point before = Clock::now();
    std::optional<GpuTelemetry> read = m_source();
    // The read's time: the middle of the calls that made it.
    const Clock::time_point at = before + (Clock::now() - before) / 2;
    lock.lock();
    if (read) m_reads.emplace_back(at, *read);
    m_cv.wait_for(lock, m_period, [this] { return m_stop; });
  }
}

GpuTelemetry TelemetryWindow::close(std::chrono::microseconds span) {
  const Clock::time_point end = Clock::now();
  {
    std::lock_guard lock(m_mu);
    m_stop = true;
  }
  m_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
  std::vector<GpuTelemetry> in_window;
  for (const auto& [at, read] : m_reads)
    if (at >= end - span && at <= end) in_window.push_back(read);
  return summarize_telemetry(in_window);
}

namespace {

template <typename T>
T median_of(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / T(2);
}

}  // namespace

GpuTelemetry summarize_telemetry(const std::vector<GpuTelemetry>& records) {
  GpuTelemetry s;
  if (records.empty()) return s;
  std::vector<int> sm, mem, util, counted;
  std::vector<double> power;
  double capped = 0;
  for (const GpuTelemetry& r : records) {
    if (r.sm_clock_counted_mhz > 0) counted.push_back(r.sm_clock_counted_mhz);
    sm.push_back(r.sm_clock_mhz);
    mem.push_back(r.mem_clock_mhz);
    util.push_back(r.utilization_percent);
    power.push_back(r.power_w);
    s.temperature_c = std::max(s.temperature_c, r.temperature_c);
    s.clock_event_reasons |= r.clock_event_reasons;
    const int weight = std::max(1, r.samples);
    s.samples += weight;
    capped += r.samples > 0 ? r.power_capped_share * weight
                            : (r.clock_event_reasons & k_clock_event_sw_power_cap ? 1.0 : 0.0);
  }
  s.sm_clock_mhz = median_of(sm);
  s.mem_clock_mhz = median_of(mem);
  s.utilization_percent = median_of(util);
  s.power_w = median_of(power);
  s.power_capped_share = capped / s.samples;
  if (!counted.empty()) s.sm_clock_counted_mhz = median_of(counted);
  return s;
}

}  // namespace ktune
