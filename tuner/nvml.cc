#include "tuner/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>

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
// nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v2/_v3 fill it: {unsigned pid;
// unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId;}, 24 bytes, pid
// first. Drivers 535.43 to 535.86 wrote a 32-byte entry (usedGpuCcProtectedMemory appended) from
// _v3 without a version bump, so entries are read by stride from a buffer sized for 32 bytes.
constexpr std::size_t k_process_info_size = 24;
constexpr std::size_t k_process_info_size_r535 = 32;
constexpr int k_nvml_success = 0;
constexpr int k_nvml_insufficient_size = 7;
constexpr int k_clock_sm = 1;
constexpr int k_clock_mem = 2;
constexpr int k_temperature_gpu = 0;
// nvmlFieldValue_t, and the field of the instantaneous power (mW). The 1-s average of
// nvmlDeviceGetPowerUsage lags a measurement of tens of milliseconds by most of a second.
constexpr unsigned k_field_power_instant = 186;
struct nvmlFieldValue_t {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;  // 0 double, 1 unsigned int, 2 unsigned long, 3 unsigned long long, ...
  nvmlReturn_t nvml_return;
  union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
  } value;
};
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t is 40 bytes in NVML's ABI");
}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  // Optional: absent on old drivers, which then lack only what needs them.
  nvmlReturn_t (*field_values)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;
  nvmlReturn_t (*clock_event_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*compute_processes)(nvmlDevice_t, unsigned int*, void*) = nullptr;
  const char* compute_processes_symbol = "";
  std::size_t process_info_size = k_process_info_size;  // the stride compute_processes writes
  const char* (*error_string)(nvmlReturn_t) = nullptr;
};

namespace {

// "nvmlDeviceGetUtilizationRates: Not Supported (3)"
template <typename Api>
std::string nvml_error(const Api& api, const char* call, nvmlReturn_t r) {
  std::string what = api.error_string ? api.error_string(r) : "error";
  return std::string(call) + ": " + what + " (" + std::to_string(r) + ")";
}

// Whether this driver's _v3 process query writes the 32-byte entry (535.43 <= version < 535.98).
bool is_r535_v3_layout(const std::string& driver_version, std::string_view symbol) {
  int major = 0, minor = 0;
  if (std::sscanf(driver_version.c_str(), "%d.%d", &major, &minor) != 2) return false;
  return symbol.ends_with("_v3") && major == 535 && minor >= 43 && minor < 98;
}

// The handle of the GPU with this PCI bus id. (A template so it can take the private Api.)
template <typename Api>
Result<nvmlDevice_t> device_by_pci(const Api& api, const std::string& pci_bus_id) {
  nvmlDevice_t dev = nullptr;
  if (pci_bus_id.empty()) return fail(ErrorCode::invalid_argument, "no PCI bus id for the GPU");
  if (nvmlReturn_t r = api.by_pci(pci_bus_id.c_str(), &dev); r != k_nvml_success)
    return fail(ErrorCode::unavailable, "NVML does not know GPU " + pci_bus_id + ": " +
                                            nvml_error(api, "nvmlDeviceGetHandleByPciBusId", r));
  return dev;
}

// The GPU's power now, in mW, where the driver has the field.
template <typename Api>
std::optional<double> instant_power_mw(const Api& api, nvmlDevice_t dev) {
  if (!api.field_values) return std::nullopt;
  nvmlFieldValue_t f{};
  f.field_id = k_field_power_instant;
  if (api.field_values(dev, 1, &f) != k_nvml_success || f.nvml_return != k_nvml_success)
    return std::nullopt;
  switch (f.value_type) {
    case 0:
      return f.value.d;
    case 1:
      return double(f.value.ui);
    case 2:
      return double(f.value.ul);
    case 3:
      return double(f.value.ull);
    default:
      return std::nullopt;
  }
}

}  // namespace

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
    for (const char* symbol :
         {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}) {
      api.compute_processes =
          reinterpret_cast<decltype(api.compute_processes)>(::dlsym(lib, symbol));
      api.compute_processes_symbol = symbol;
      if (api.compute_processes) break;
    }
    api.field_values =
        reinterpret_cast<decltype(api.field_values)>(::dlsym(lib, "nvmlDeviceGetFieldValues"));
    // Renamed in R535; the old name stays exported.
    for (const char* symbol :
         {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}) {
      api.clock_event_reasons =
          reinterpret_cast<decltype(api.clock_event_reasons)>(::dlsym(lib, symbol));
      if (api.clock_event_reasons) break;
    }
    api.error_string =
        reinterpret_cast<decltype(api.error_string)>(::dlsym(lib, "nvmlErrorString"));
    if (failure) return;
    if (api.init() != k_nvml_success) {
      failure = Error{ErrorCode::unavailable, "nvmlInit failed"};
      return;
    }
    nvml.m_api = &api;
    if (auto version = nvml.driver_version();
        version && api.compute_processes &&
        is_r535_v3_layout(*version, api.compute_processes_symbol))
      api.process_info_size = k_process_info_size_r535;
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
  auto handle = device_by_pci(*m_api, pci_bus_id);
  if (!handle) return std::unexpected(handle.error());
  nvmlDevice_t dev = *handle;
  GpuTelemetry t;
  unsigned v = 0;
  if (m_api->clock(dev, k_clock_sm, &v) == k_nvml_success) t.sm_clock_mhz = int(v);
  if (m_api->clock(dev, k_clock_mem, &v) == k_nvml_success) t.mem_clock_mhz = int(v);
  if (auto mw = instant_power_mw(*m_api, dev))
    t.power_w = *mw / 1000.0;
  else if (m_api->power(dev, &v) == k_nvml_success)
    t.power_w = v / 1000.0;
  unsigned long long reasons = 0;
  if (m_api->clock_event_reasons && m_api->clock_event_reasons(dev, &reasons) == k_nvml_success)
    t.clock_event_reasons = reasons;
  if (m_api->temperature(dev, k_temperature_gpu, &v) == k_nvml_success) t.temperature_c = int(v);
  nvmlUtilization_t u{};
  if (m_api->utilization(dev, &u) == k_nvml_success) t.utilization_percent = int(u.gpu);
  return t;
}

Result<int> Nvml::utilization(const std::string& pci_bus_id) const {
  auto dev = device_by_pci(*m_api, pci_bus_id);
  if (!dev) return std::unexpected(dev.error());
  nvmlUtilization_t u{};
  if (nvmlReturn_t r = m_api->utilization(*dev, &u); r != k_nvml_success)
    return fail(ErrorCode::unavailable, nvml_error(*m_api, "nvmlDeviceGetUtilizationRates", r));
  return int(u.gpu);
}

Result<std::vector<std::uint32_t>> Nvml::compute_pids(const std::string& pci_bus_id) const {
  if (!m_api->compute_processes)
    return fail(ErrorCode::unavailable, "NVML lacks nvmlDeviceGetComputeRunningProcesses_v2/_v3");
  auto dev = device_by_pci(*m_api, pci_bus_id);
  if (!dev) return std::unexpected(dev.error());
  // The list can grow between the call that sizes it and the one that fills it: retry a few
  // times with the size NVML asked for plus some room. The buffer always has room for the
  // larger entry, so a driver that writes it cannot overrun us.
  std::size_t capacity = 32;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::vector<std::uint64_t> buffer(capacity * k_process_info_size_r535 / sizeof(std::uint64_t));
    unsigned count = unsigned(capacity);
    nvmlReturn_t r = m_api->compute_processes(*dev, &count, buffer.data());
    if (r == k_nvml_success) {
      std::vector<std::uint32_t> pids(std::min<std::size_t>(count, capacity));
      const auto* bytes = reinterpret_cast<const unsigned char*>(buffer.data());
      for (std::size_t i = 0; i < pids.size(); ++i)
        std::memcpy(&pids[i], bytes + i * m_api->process_info_size, sizeof(std::uint32_t));
      return pids;
    }
    if (r != k_nvml_insufficient_size)
      return fail(ErrorCode::unavailable, nvml_error(*m_api, m_api->compute_processes_symbol, r));
    capacity = std::max<std::size_t>(count + 16, capacity * 2);
  }
  return fail(ErrorCode::unavailable,
              std::string(m_api->compute_processes_symbol) + ": the process list kept growing");
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
