// NodeIdentity: what this node is — its GPUs (if any) and the validators its measurements carry.
//
// GPUs come from the CUDA driver (dlopen, no context is created). On a node where the driver
// cannot be asked in-process but a worker executable was named explicitly (tuning.worker, e.g.
// the fake worker of the tests), each ordinal of tuning.devices is asked through a short-lived
// worker's hello instead. Built once at start; read-only afterwards.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "tuner/cuda_driver.h"

namespace ktune {

struct NodeIdentity {
  std::vector<GpuInfo> gpus;  // empty on a node without a GPU
  std::string gpu_error;      // why there is none
  std::string driver;         // validator: driver version, "none" without a driver
  std::string nvrtc;          // validator: NVRTC version
  std::string node_id;        // host name

  // Detects GPUs (driver via dlopen, or worker hellos; see above), versions and the host name.
  static NodeIdentity detect(const DaemonConfig& config);
  // Whether `device_id` is the class of one of this node's GPUs.
  bool owns(const std::string& device_id) const;
  // The limits constraints are checked against for a device class: the GPU's own when this
  // node has one of the class, else those of its arch (DeviceLimits::for_arch, or the sm_90
  // defaults for an arch it does not know) with the class's cc and SM count.
  DeviceLimits limits_for(const DeviceClass& device) const;
};

// A GpuInfo from a worker's hello reply (docs/worker-protocol.md).
Result<GpuInfo> gpu_from_hello(const nlohmann::json& hello, int ordinal);

}  // namespace ktune
