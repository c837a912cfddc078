// The driver tables load from a libcuda.so.1 older than CUDA 12.8 (R535/R550 drivers, still
// common on fleets): the stand-in library built beside this test exports every entry point they
// load but names the event timer cuEventElapsedTime, without _v2. ctest runs this binary with
// LD_LIBRARY_PATH at that library. (Both tables required cuEventElapsedTime_v2, so every launch
// through ktune::Kernel, and every GPU trial, failed with "the CUDA driver lacks
// cuEventElapsedTime_v2" on such a driver.)
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "client/cuda_api.h"
#include "tuner/cuda_driver.h"

namespace ktune {
namespace {

TEST(OldDriverTest, TheStandInIsADriverWithoutTheV2EventTimer) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << "run through ctest: LD_LIBRARY_PATH names the stand-in";
  EXPECT_EQ(::dlsym(lib, "cuEventElapsedTime_v2"), nullptr);
  EXPECT_NE(::dlsym(lib, "cuEventElapsedTime"), nullptr);
  EXPECT_NE(::dlsym(lib, "cuMemAlloc_v2"), nullptr);
}

TEST(OldDriverTest, TheClientTableLoadsWithTheOlderEventTimer) {
  auto api = cuda::CudaApi::get();
  ASSERT_TRUE(api) << api.error().message;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  EXPECT_EQ(reinterpret_cast<void*>((*api)->cuEventElapsedTime),
            ::dlsym(lib, "cuEventElapsedTime"));
}

TEST(OldDriverTest, TheTunerTableLoadsWithTheOlderEventTimer) {
  auto driver = CudaDriver::get();
  ASSERT_TRUE(driver) << driver.error().message;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  EXPECT_EQ(reinterpret_cast<void*>((*driver)->cuEventElapsedTime),
            ::dlsym(lib, "cuEventElapsedTime"));
}

}  // namespace
}  // namespace ktune
