#include "tuner/nvml.h"

#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "tuner/cuda_driver.h"

namespace ktune {

// NVML's ABI, declared here (the toolkit on the build machines ships no nvml.h).
namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
constexpr int k_nvml_success = 0;
constexpr int k_clock_sm = 1;
constexpr int k_clock_mem = 2;
constexpr int k_temperature_gpu = 0;
}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
};

Result<const Nvml*> Nvml::get() {
  static std::once_flag once;
  static Api api;
  static Nvml nvml;
  static std::optional<Error> failure;
  std::call_once(once, [] {
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure = Error{ErrorCode::unavailable, std::string("no NVML: ") + ::dlerror()};
      return;
    }
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, symbol));
      if (!fn && !failure)
        failure = Error{ErrorCode::unavailable, std::string("NVML lacks ") + symbol};
    };
    load(api.init, "nvmlInit_v2");
    load(api.driver_version, "nvmlSystemGetDriverVersion");
    load(api.by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    load(api.utilization, "nvmlDeviceGetUtilizationRates");
    load(api.clock, "nvmlDeviceGetClockInfo");
    load(api.power, "nvmlDeviceGetPowerUsage");
    load(api.temperature, "nvmlDeviceGetTemperature");
    if (failure) return;
    if (api.init() != k_nvml_success) {
      failure = Error{ErrorCode::unavailable, "nvmlInit failed"};
      return;
    }
    nvml.m_api = &api;
  });
  if (failure) return std::unexpected(*failure);
  return &nvml;
}

Result<std::string> Nvml::driver_version() const {
  char buf[96] = {};
  if (m_api->driver_version(buf, sizeof buf) != k_nvml_success)
    return fail(ErrorCode::unavailable, "nvmlSystemGetDriverVersion failed");
  return std::string(buf);
}

Result<GpuTelemetry> Nvml::telemetry(const std::string& pci_bus_id) const {
  nvmlDevice_t dev = nullptr;
  if (m_api->by_pci(pci_bus_id.c_str(), &dev) != k_nvml_success)
    return fail(ErrorCode::unavailable, "NVML does not know GPU " + pci_bus_id);
  GpuTelemetry t;
  unsigned v = 0;
  if (m_api->clock(dev, k_clock_sm, &v) == k_nvml_success) t.sm_clock_mhz = int(v);
  if (m_api->clock(dev, k_clock_mem, &v) == k_nvml_success) t.mem_clock_mhz = int(v);
  if (m_api->power(dev, &v) == k_nvml_success) t.power_w = v / 1000.0;
  if (m_api->temperature(dev, k_temperature_gpu, &v) == k_nvml_success) t.temperature_c = int(v);
  nvmlUtilization_t u{};
  if (m_api->utilization(dev, &u) == k_nvml_success) t.utilization_percent = int(u.gpu);
  return t;
}

std::string node_driver_version() {
  if (auto nvml = Nvml::get()) {
    if (auto v = (*nvml)->driver_version()) return *v;
  }
  if (auto driver = CudaDriver::get()) {
    int version = 0;
    if ((*driver)->cuDriverGetVersion(&version) == CUDA_SUCCESS)
      return "cuda-" + std::to_string(version);
  }
  return "none";
}

}  // namespace ktune
