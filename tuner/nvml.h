// Nvml: the few NVML queries ktune needs, loaded with dlopen("libnvidia-ml.so.1").
//
// Used for the driver's version string (a validator of every winner), for the clocks and power
// recorded with each measurement, and for what the idle policy watches: utilization and the pids
// with a compute context (tuner/gpu_monitor.h).
// Absent NVML is normal (containers, CI): every query then returns ErrorCode::unavailable and
// callers record zeros. Thread-safe after get().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/error.h"

namespace ktune {

// NVML's clock event reasons (nvmlClocksEventReason*, a bitmask): why the SM clock is below its
// maximum. Values of NVML's ABI.
enum ClockEventReason : std::uint64_t {
  k_clock_event_gpu_idle = 0x1,
  k_clock_event_sw_power_cap = 0x4,
  k_clock_event_hw_slowdown = 0x8,
  k_clock_event_sw_thermal = 0x20,
  k_clock_event_hw_thermal = 0x40,
  k_clock_event_hw_power_brake = 0x80,
};

// One read of a GPU's state, or a summary of reads taken while a measurement ran
// (tuner/telemetry_window.h). Zeros where NVML is absent or cannot say.
struct GpuTelemetry {
  int sm_clock_mhz = 0;
  int mem_clock_mhz = 0;
  double power_w = 0;           // instantaneous where the driver has it, else NVML's 1-s average
  int utilization_percent = 0;  // GPU busy over NVML's last sample period
  int temperature_c = 0;
  std::uint64_t clock_event_reasons = 0;  // ClockEventReason bits (a summary: every bit seen)
  // A summary's: how many reads it summarizes (0: a single read, taken after the measurement),
  // and the share of them with the power cap holding the SM clock down.
  int samples = 0;
  double power_capped_share = 0;
  // The SM clock counted by the GPU itself right after the timed launches: cycles (%clock64) over
  // 100 us of %globaltimer in a one-thread kernel (0: not counted). NVML's clock can lag a timing
  // shorter than ~0.1 s; this one cannot.
  int sm_clock_counted_mhz = 0;

  friend bool operator==(const GpuTelemetry&, const GpuTelemetry&) = default;
};

class Nvml {
 public:
  // The process-wide NVML, initialized on first call.
  static Result<const Nvml*> get();

  // "580.159.03"
  Result<std::string> driver_version() const;
  // Telemetry of the GPU with this PCI bus id ("0000:3B:00.0"): one read, a few NVML calls
  // (tens of microseconds each).
  Result<GpuTelemetry> telemetry(const std::string& pci_bus_id) const;
  // GPU busy percent over NVML's last sample period (1/6 s to 1 s, by product).
  Result<int> utilization(const std::string& pci_bus_id) const;
  // Pids of the processes with a compute context on the GPU. A process NVML cannot attribute to
  // the caller's pid namespace (another container's) may be missing from the list.
  // Uses nvmlDeviceGetComputeRunningProcesses_v3 (R510+), else _v2.
  Result<std::vector<std::uint32_t>> compute_pids(const std::string& pci_bus_id) const;

 private:
  struct Api;
  const Api* m_api = nullptr;
};

// The driver validator for this node: NVML's version string, else "cuda-<driver API version>",
// else "none" (no driver at all).
std::string node_driver_version();

}  // namespace ktune
