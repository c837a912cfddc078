#include "client/cuda_api.h"

#include <dlfcn.h>

#include <mutex>
#include <optional>
#include <string_view>

namespace ktune::cuda {

namespace {

// dlsym, and for an entry point newer drivers export as `_v2`, the older name an older driver
// exports with the same signature (cuEventElapsedTime_v2 came with CUDA 12.8; R535 and R550
// drivers have only cuEventElapsedTime).
void* find_symbol(void* lib, const char* symbol) {
  if (void* f = ::dlsym(lib, symbol)) return f;
  if (std::string_view(symbol) == "cuEventElapsedTime_v2")
    return ::dlsym(lib, "cuEventElapsedTime");
  return nullptr;
}

}  // namespace

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
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA_ERROR_" + std::to_string(int(r))) + ": " +
         (text ? text : "unknown error");
}

protocol::Error CudaApi::error(CUresult r, const std::string& what) const {
  return protocol::Error{protocol::ErrorKind::unavailable, what + " failed: " + describe(r)};
}

}  // namespace ktune::cuda
