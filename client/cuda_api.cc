#include "client/cuda_api.h"

#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "client/cuda_symbols.h"

namespace ktune::cuda {

protocol::Expected<const CudaApi*> CudaApi::get() {
  static std::once_flag once;
  static CudaApi api;
  static std::optional<protocol::Error> failure;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure = protocol::Error{protocol::ErrorKind::unavailable,
                                std::string("no CUDA driver: ") + ::dlerror()};
      return;
    }
#define KTUNE_LOAD(name, symbol)                                                     \
  api.name = reinterpret_cast<decltype(api.name)>(find_symbol(lib, symbol));         \
  if (!api.name) {                                                                   \
    failure = protocol::Error{protocol::ErrorKind::unavailable,                      \
                              "the CUDA driver lacks " + std::string(symbol) +       \
                                  " (ktune needs a driver for CUDA 12.0 or newer)"}; \
    return;                                                                          \
  }
    KTUNE_CLIENT_CUDA_FUNCTIONS(KTUNE_LOAD)
#undef KTUNE_LOAD
    if (const CUresult r = api.cuInit(0); r != CUDA_SUCCESS) failure = api.error(r, "cuInit");
  });
  if (failure) return std::unexpected(*failure);
  return &api;
}

std::string CudaApi::describe(CUresult r) const {
  return cuda::describe_result(r, cuGetErrorName, cuGetErrorString);
}

protocol::Error CudaApi::error(CUresult r, const std::string& what) const {
  return protocol::Error{protocol::ErrorKind::unavailable, what + " failed: " + describe(r)};
}

}  // namespace ktune::cuda
