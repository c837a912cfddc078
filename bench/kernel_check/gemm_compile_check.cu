// gemm_compile_check.cu — explicit instantiations of the gemm template for every config in
// gemm_configs.inc, so nvcc + ptxas report registers and spills per config (no GPU needed):
//   nvcc -std=c++17 -arch=sm_90 -Xptxas -v -I templates/common -I templates/gemm \
//        -c bench/kernel_check/gemm_compile_check.cu -o /tmp/gemm_compile_check.o
#include "gemm.cuh"

#define KTUNE_GEMM_CONFIG(TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK)                   \
  template __global__ void ktune_gemm<TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK>(     \
      const TI*, const TI*, TO*, float*, int*, int, int, int, float, float);
#include "gemm_configs.inc"
#undef KTUNE_GEMM_CONFIG
