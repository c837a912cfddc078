// CudaApi: the CUDA driver entry points the client library uses, loaded with
// dlopen("libcuda.so.1") on first use — never linked, so an application linking ktune_client
// builds, links and starts on a machine with no GPU driver (CI has none); only a launch needs one.
// The same table serves the GPU tests and benchmarks (allocations, copies, events).
//
// Not part of the installed API (it needs <cuda.h>); ktune::Kernel is. Thread-safety: get() loads
// once (std::call_once); the pointers are then read-only and the driver API is thread-safe.
#pragma once

#include <cuda.h>

#include <string>

#include "client/protocol.h"

namespace ktune::cuda {

// X-macro of (member name, exported symbol); member types come from cuda.h's declarations.
#define KTUNE_CLIENT_CUDA_FUNCTIONS(X)                                      \
  X(cuInit, "cuInit")                                                       \
  X(cuGetErrorName, "cuGetErrorName")                                       \
  X(cuGetErrorString, "cuGetErrorString")                                   \
  X(cuDeviceGet, "cuDeviceGet")                                             \
  X(cuDeviceGetCount, "cuDeviceGetCount")                                   \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                           \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                   \
  X(cuCtxGetCurrent, "cuCtxGetCurrent")                                     \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                                     \
  X(cuCtxPushCurrent, "cuCtxPushCurrent_v2")                                \
  X(cuCtxPopCurrent, "cuCtxPopCurrent_v2")                                  \
  X(cuCtxGetDevice, "cuCtxGetDevice")                                       \
  X(cuCtxSynchronize, "cuCtxSynchronize")                                   \
  X(cuModuleLoadData, "cuModuleLoadData")                                   \
  X(cuModuleUnload, "cuModuleUnload")                                       \
  X(cuModuleGetFunction, "cuModuleGetFunction")                             \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                               \
  X(cuLaunchKernel, "cuLaunchKernel")                                       \
  X(cuLaunchKernelEx, "cuLaunchKernelEx")                                   \
  X(cuMemAlloc, "cuMemAlloc_v2")                                            \
  X(cuMemFree, "cuMemFree_v2")                                              \
  X(cuMemsetD8, "cuMemsetD8_v2")                                            \
  X(cuMemsetD8Async, "cuMemsetD8Async")                                     \
  X(cuStreamIsCapturing, "cuStreamIsCapturing")                             \
  X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode") \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2")                        \
  X(cuStreamEndCapture, "cuStreamEndCapture")                               \
  X(cuGraphInstantiate, "cuGraphInstantiateWithFlags")                      \
  X(cuGraphLaunch, "cuGraphLaunch")                                         \
  X(cuGraphExecDestroy, "cuGraphExecDestroy")                               \
  X(cuGraphDestroy, "cuGraphDestroy")                                       \
  X(cuGraphGetNodes, "cuGraphGetNodes")                                     \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                                        \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2")                                        \
  X(cuStreamCreate, "cuStreamCreate")                                       \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                                  \
  X(cuStreamSynchronize, "cuStreamSynchronize")                             \
  X(cuEventCreate, "cuEventCreate")                                         \
  X(cuEventDestroy, "cuEventDestroy_v2")                                    \
  X(cuEventRecord, "cuEventRecord")                                         \
  X(cuEventSynchronize, "cuEventSynchronize")                               \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2")                            \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")

struct CudaApi {
#define KTUNE_DECLARE(name, symbol) decltype(&::name) name = nullptr;
  KTUNE_CLIENT_CUDA_FUNCTIONS(KTUNE_DECLARE)
#undef KTUNE_DECLARE

  // The process-wide table, loaded and cuInit'ed on first call; `unavailable` with the reason
  // (no libcuda.so.1, a missing symbol, cuInit failed) when there is no usable driver.
  static protocol::Expected<const CudaApi*> get();

  // "CUDA_ERROR_INVALID_VALUE: invalid argument"
  std::string describe(CUresult r) const;
  // An Error naming the call that failed and the driver's reason.
  protocol::Error error(CUresult r, const std::string& what) const;
};

}  // namespace ktune::cuda
