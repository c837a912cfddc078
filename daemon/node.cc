#include "daemon/node.h"

#include <unistd.h>

#include <algorithm>

#include "tuner/compiler.h"
#include "tuner/nvml.h"
#include "tuner/worker_process.h"

namespace ktune {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Result<GpuInfo> gpu_from_hello(const nlohmann::json& hello, int ordinal) {
  try {
    const auto& d = hello.at("device");
    GpuInfo g;
    g.ordinal = ordinal;
    g.device_class = DeviceClass{d.at("name").get<std::string>(), d.at("cc").get<int>(),
                                 d.at("sm_count").get<int>(), d.at("memory_gib").get<int>()};
    auto limits = DeviceLimits::for_arch("sm_" + std::to_string(g.device_class.cc));
    g.limits = limits ? *limits : DeviceLimits{};
    g.limits.cc = g.device_class.cc;
    g.limits.sm_count = g.device_class.sm_count;
    if (auto l = hello.find("limits"); l != hello.end()) {
      g.limits.max_threads_per_block =
          l->value("max_threads_per_block", g.limits.max_threads_per_block);
      g.limits.max_smem_per_block = l->value("max_smem_per_block", g.limits.max_smem_per_block);
      g.limits.max_regs_per_block = l->value("max_regs_per_block", g.limits.max_regs_per_block);
      g.limits.l2_bytes = l->value("l2_bytes", g.limits.l2_bytes);
    }
    g.pci_bus_id = hello.value("pci_bus_id", "worker:" + std::to_string(ordinal));
    g.driver_cuda_version = hello.value("driver_cuda_version", 0);
    g.memory_bytes = std::size_t(g.device_class.memory_gib) << 30;
    return g;
  } catch (const std::exception& e) {
    return fail(ErrorCode::invalid_argument, std::string("malformed worker hello: ") + e.what());
  }
}

NodeIdentity NodeIdentity::detect(const DaemonConfig& config) {
  NodeIdentity n;
  n.node_id = host_name();
  n.nvrtc = Compiler::nvrtc_version();
  n.driver = node_driver_version();
  const auto& devices = config.devices;
  auto gpus = query_gpus();
  if (gpus) {
    for (auto& g : *gpus)
      if (devices.empty() || std::find(devices.begin(), devices.end(), g.ordinal) != devices.end())
        n.gpus.push_back(std::move(g));
    if (n.gpus.empty()) n.gpu_error = "no GPU matches tuning.devices";
    return n;
  }
  n.gpu_error = gpus.error().message;
  if (config.worker_binary.empty()) return n;
  // No driver in this process, but a worker was named: ask it what it drives.
  for (int ordinal : devices.empty() ? std::vector<int>{0} : devices) {
    auto w = WorkerProcess::spawn(config.worker_binary, ordinal, 30'000);
    if (!w) {
      n.gpu_error += "; worker for GPU " + std::to_string(ordinal) + ": " + w.error().message;
      continue;
    }
    auto g = gpu_from_hello((*w)->hello(), ordinal);
    if (g) n.gpus.push_back(std::move(*g));
  }
  if (!n.gpus.empty()) n.gpu_error.clear();
  return n;
}

bool NodeIdentity::owns(const std::string& device_id) const {
  return std::any_of(gpus.begin(), gpus.end(),
                     [&](const GpuInfo& g) { return g.device_class.id() == device_id; });
}

DeviceLimits NodeIdentity::limits_for(const DeviceClass& device) const {
  const std::string id = device.id();
  for (const auto& g : gpus)
    if (g.device_class.id() == id) return g.limits;
  auto l = DeviceLimits::for_arch("sm_" + std::to_string(device.cc));
  DeviceLimits out = l ? *l : DeviceLimits{};
  out.cc = device.cc;
  out.sm_count = device.sm_count;
  return out;
}

}  // namespace ktune
