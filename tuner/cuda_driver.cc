#include "tuner/cuda_driver.h"

#include <dlfcn.h>

#include <cmath>
#include <mutex>
#include <optional>

#include "client/cuda_symbols.h"

namespace ktune {

Result<const CudaDriver*> CudaDriver::get() {
  static std::once_flag once;
  static CudaDriver driver;
  static std::optional<Error> failure;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure = Error{ErrorCode::unavailable, std::string("no CUDA driver: ") + ::dlerror()};
      return;
    }
#define KTUNE_LOAD(name, symbol)                                                         \
  driver.name = reinterpret_cast<decltype(driver.name)>(cuda::find_symbol(lib, symbol)); \
  if (!driver.name) {                                                                    \
    failure = Error{ErrorCode::unavailable, "CUDA driver lacks " + std::string(symbol)}; \
    return;                                                                              \
  }
    KTUNE_CUDA_DRIVER_FUNCTIONS(KTUNE_LOAD)
#undef KTUNE_LOAD
#define KTUNE_LOAD_OPTIONAL(name, symbol) \
  driver.name = reinterpret_cast<decltype(driver.name)>(cuda::find_symbol(lib, symbol));
    KTUNE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(KTUNE_LOAD_OPTIONAL)
#undef KTUNE_LOAD_OPTIONAL
    const CUresult r = driver.cuInit(0);
    if (r != CUDA_SUCCESS)
      failure = Error{ErrorCode::unavailable, "cuInit failed: " + driver.describe(r)};
  });
  if (failure) return std::unexpected(*failure);
  return &driver;
}

std::string CudaDriver::describe(CUresult r) const {
  return cuda::describe_result(r, cuGetErrorName, cuGetErrorString);
}

Result<std::vector<GpuInfo>> query_gpus() {
  auto driver = CudaDriver::get();
  if (!driver) return std::unexpected(driver.error());
  const CudaDriver& d = **driver;
  int count = 0;
  if (CUresult r = d.cuDeviceGetCount(&count); r != CUDA_SUCCESS)
    return fail(ErrorCode::unavailable, "cuDeviceGetCount: " + d.describe(r));
  if (count == 0) return fail(ErrorCode::unavailable, "the CUDA driver shows no GPU");
  int version = 0;
  d.cuDriverGetVersion(&version);
  std::vector<GpuInfo> out;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (CUresult r = d.cuDeviceGet(&dev, i); r != CUDA_SUCCESS)
      return fail(ErrorCode::unavailable, "cuDeviceGet: " + d.describe(r));
    GpuInfo g;
    g.ordinal = i;
    g.driver_cuda_version = version;
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof name, dev);
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      d.cuDeviceGetAttribute(&v, a, dev);
      return v;
    };
    const int major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    const int minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d.cuDeviceTotalMem(&g.memory_bytes, dev);
    char bus[64] = {};
    if (d.cuDeviceGetPCIBusId(bus, sizeof bus, dev) == CUDA_SUCCESS) g.pci_bus_id = bus;
    g.device_class.name = name;
    g.device_class.cc = major * 10 + minor;
    g.device_class.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    g.device_class.memory_gib = int(std::lround(double(g.memory_bytes) / double(1ull << 30)));
    g.limits.cc = g.device_class.cc;
    g.limits.sm_count = g.device_class.sm_count;
    g.limits.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    g.limits.max_smem_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    g.limits.max_regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    g.limits.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    out.push_back(std::move(g));
  }
  return out;
}

bool is_sticky_cuda_error(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

}  // namespace ktune
