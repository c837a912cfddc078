// CudaDriver: the CUDA driver API, loaded with dlopen("libcuda.so.1") at run time.
//
// Nothing in ktune links libcuda: the daemon, the CLI and the tests must start on machines with
// no GPU driver (CI has none). load() reports why the driver is unavailable instead of failing
// the process. Only the worker creates a context; the daemon uses the device queries alone.
//
// Thread-safety: load() once (it is idempotent and internally locked); the function pointers are
// then read-only and the driver API itself is thread-safe.
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "config/error.h"
#include "config/problem.h"

namespace ktune {

// X-macro of (member name, exported symbol). Member types come from cuda.h's declarations.
#define KTUNE_CUDA_DRIVER_FUNCTIONS(X)                         \
  X(cuInit, "cuInit")                                          \
  X(cuDriverGetVersion, "cuDriverGetVersion")                  \
  X(cuDeviceGetCount, "cuDeviceGetCount")                      \
  X(cuDeviceGet, "cuDeviceGet")                                \
  X(cuDeviceGetName, "cuDeviceGetName")                        \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")              \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2")                   \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")                \
  X(cuGetErrorName, "cuGetErrorName")                          \
  X(cuGetErrorString, "cuGetErrorString")                      \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")      \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                        \
  X(cuCtxSynchronize, "cuCtxSynchronize")                      \
  X(cuModuleLoadData, "cuModuleLoadData")                      \
  X(cuModuleUnload, "cuModuleUnload")                          \
  X(cuModuleGetFunction, "cuModuleGetFunction")                \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                  \
  X(cuFuncGetAttribute, "cuFuncGetAttribute")                  \
  X(cuLaunchKernel, "cuLaunchKernel")                          \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                 \
    "cuOccupancyMaxActiveBlocksPerMultiprocessor")               \
  X(cuMemAlloc, "cuMemAlloc_v2")                               \
  X(cuMemFree, "cuMemFree_v2")                                 \
  X(cuMemGetInfo, "cuMemGetInfo_v2")                           \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                           \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2")                           \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2")                           \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")                 \
  X(cuMemsetD8, "cuMemsetD8_v2")                               \
  X(cuMemsetD32, "cuMemsetD32_v2")                             \
  X(cuMemsetD8Async, "cuMemsetD8Async")                        \
  X(cuMemsetD32Async, "cuMemsetD32Async")                      \
  X(cuStreamCreate, "cuStreamCreate")                          \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                     \
  X(cuStreamSynchronize, "cuStreamSynchronize")                \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2")           \
  X(cuStreamEndCapture, "cuStreamEndCapture")                  \
  X(cuGraphInstantiate, "cuGraphInstantiateWithFlags")         \
  X(cuGraphLaunch, "cuGraphLaunch")                            \
  X(cuGraphExecDestroy, "cuGraphExecDestroy")                  \
  X(cuGraphDestroy, "cuGraphDestroy")                          \
  X(cuEventCreate, "cuEventCreate")                            \
  X(cuEventDestroy, "cuEventDestroy_v2")                       \
  X(cuEventRecord, "cuEventRecord")                            \
  X(cuEventSynchronize, "cuEventSynchronize")                  \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2")

// Entry points a driver may lack (all came with CUDA 12.0): null when absent, and only the
// features that need them fail (tensor maps, cluster launches, cluster occupancy).
#define KTUNE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(X)           \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")     \
  X(cuLaunchKernelEx, "cuLaunchKernelEx")                 \
  X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters")

struct CudaDriver {
#define KTUNE_DECLARE(name, symbol) decltype(&::name) name = nullptr;
  KTUNE_CUDA_DRIVER_FUNCTIONS(KTUNE_DECLARE)
  KTUNE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(KTUNE_DECLARE)
#undef KTUNE_DECLARE

  // The process-wide driver, loaded and cuInit'ed on first call. ErrorCode::unavailable with
  // the reason (no libcuda.so.1, no device, init failure) when there is none.
  static Result<const CudaDriver*> get();

  // "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
  std::string describe(CUresult r) const;
};

// What the driver says about one GPU.
struct GpuInfo {
  int ordinal = 0;
  DeviceClass device_class;
  DeviceLimits limits;
  int driver_cuda_version = 0;  // cuDriverGetVersion, e.g. 13000
  std::string pci_bus_id;       // "0000:3B:00.0", to find the same GPU in NVML
  std::size_t memory_bytes = 0;
};

// Every GPU the driver shows; ErrorCode::unavailable when there is no driver or no GPU.
Result<std::vector<GpuInfo>> query_gpus();

// Whether a CUresult leaves the context unusable (illegal address, launch failure, ...): the
// worker must then report and exit.
bool is_sticky_cuda_error(CUresult r);

}  // namespace ktune
