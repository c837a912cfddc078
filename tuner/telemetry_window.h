// TelemetryWindow: reads a GPU's clocks and power on a thread of its own while the worker times a
// kernel, so the clock and power recorded with a measurement describe the launches measured. A
// read taken after the timing describes the GPU a moment later, and NVML's 1-s power average
// still reflects whatever ran before (bench/NOTES.md, 2026-12-04: 266-281 W read after 1.5 s of a
// 700 W kernel).
//
// The launches are asynchronous, so the window cannot see where the GPU is; it keeps every read
// with its time, and the caller, once its synchronize has returned, asks for the reads of the
// last `span` (the GPU time its events measured), which are the reads taken while the timed
// launches ran.
//
// Owned by one thread (the one that times); only the sampling thread calls the source.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "tuner/nvml.h"

namespace ktune {

class TelemetryWindow {
 public:
  using Source = std::function<std::optional<GpuTelemetry>()>;
  using Clock = std::chrono::steady_clock;

  // Starts reading `source` every `period`, the first read at once. An empty source reads
  // nothing (no NVML): close() then returns zeros.
  TelemetryWindow(Source source, std::chrono::microseconds period);
  ~TelemetryWindow();
  TelemetryWindow(const TelemetryWindow&) = delete;
  TelemetryWindow& operator=(const TelemetryWindow&) = delete;

  // Stops reading and summarizes the reads taken within `span` before now (summarize_telemetry);
  // `samples` is 0 when none was.
  // REQUIRES: called once.
  GpuTelemetry close(std::chrono::microseconds span);

 private:
  void run();

  Source m_source;
  std::chrono::microseconds m_period;
  std::mutex m_mu;
  std::condition_variable m_cv;
  bool m_stop = false;
  std::vector<std::pair<Clock::time_point, GpuTelemetry>> m_reads;  // guarded by m_mu
  std::thread m_thread;
};

// One figure for several reads or summaries: the median clocks, power and utilization of the
// records, the hottest temperature, every clock event reason seen, and the power-capped share
// over all reads (a summary weighs as many reads as it summarizes, a single read as one).
// `samples` is the number of reads summarized. Zeros for no records.
GpuTelemetry summarize_telemetry(const std::vector<GpuTelemetry>& records);

}  // namespace ktune
