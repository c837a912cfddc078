// GpuMonitor: what the idle policy sees of one GPU — its utilization and the pids that hold a
// compute context on it.
//
// The real monitor asks NVML (tuner/nvml.h, dlopen'ed); the file monitor reads a JSON file per GPU
// so tests and CI (no GPU, no driver) can play foreign work appearing and leaving. Monitors are
// stateless between samples: sample() is thread-safe and one monitor may serve every lane. The
// caller owns the monitor and keeps it alive while any GpuGate uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/error.h"

namespace ktune {

// One look at a GPU.
struct GpuActivity {
  int utilization_percent = 0;              // busy percent over the driver's last sample period
  std::vector<std::uint32_t> compute_pids;  // processes with a compute context, any order
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;

  // The GPU's activity now. `ordinal` is the CUDA ordinal, `pci_bus_id` its PCI bus id
  // ("0000:3B:00.0", GpuInfo::pci_bus_id); NVML finds the GPU by bus id because NVML's indices
  // need not follow CUDA's order. An error means the GPU could not be observed.
  virtual Result<GpuActivity> sample(int ordinal, const std::string& pci_bus_id) = 0;

  // "NVML (driver 580.95.05)", "fake NVML files in /tmp/x": for logs and status.
  virtual std::string describe() const = 0;
};

// NVML's view. ErrorCode::unavailable when libnvidia-ml.so.1 cannot be loaded or initialized.
Result<std::unique_ptr<GpuMonitor>> make_nvml_monitor();

// A fake for tests and CI: each sample reads `<dir>/gpu<ordinal>.json`,
// {"utilization": 37, "pids": [1234, 5678]} (either key may be left out: 0, none). No file means
// an idle GPU (0 %, no pids); an unreadable or malformed file is an error (ErrorCode::corruption).
// Write the file atomically (write a temporary, rename it) so a sample never sees half of it.
std::unique_ptr<GpuMonitor> make_file_monitor(std::string dir);

// A monitor whose every sample fails with `why`: what a lane watches when NVML is missing, so an
// idle-policy lane stays paused and says why instead of tuning blind.
std::unique_ptr<GpuMonitor> make_unavailable_monitor(Error why);

// The monitor ktuned uses: the file monitor on $KTUNE_FAKE_NVML_DIR when that variable is set (a
// test hook: CI plays foreign GPU work through it), NVML otherwise.
Result<std::unique_ptr<GpuMonitor>> make_gpu_monitor();

}  // namespace ktune
