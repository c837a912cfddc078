// What the client's CUDA driver table (client/cuda_api.cc) and the tuner's (tuner/cuda_driver.cc)
// share: finding an entry point in the dlopen'ed driver, and naming a CUresult. Not installed:
// only those two sources include it.
#pragma once

#include <dlfcn.h>

#include <string>
#include <string_view>

#include <cuda.h>

namespace ktune::cuda {

// dlsym, and for an entry point newer drivers export as `_v2`, the older name an older driver
// exports with the same signature (cuEventElapsedTime_v2 came with CUDA 12.8; R535 and R550
// drivers have only cuEventElapsedTime).
inline void* find_symbol(void* lib, const char* symbol) {
  if (void* f = ::dlsym(lib, symbol)) return f;
  if (std::string_view(symbol) == "cuEventElapsedTime_v2")
    return ::dlsym(lib, "cuEventElapsedTime");
  return nullptr;
}

// "CUDA_ERROR_X: text", from the driver's own names where it has them (either function may be
// missing from an old driver: null).
inline std::string describe_result(CUresult r, decltype(&::cuGetErrorName) get_name,
                                   decltype(&::cuGetErrorString) get_string) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (get_name) get_name(r, &name);
  if (get_string) get_string(r, &text);
  return std::string(name ? name : "CUDA_ERROR_" + std::to_string(int(r))) + ": " +
         (text ? text : "unknown error");
}

}  // namespace ktune::cuda
