// A tiny template for tests: y = a * x, with a vector width and a grid-stride loop.
#include "ktune_common.cuh"

template <typename T, typename TO, int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS) ktune_scale(const T* x, TO* y, int n, float a) {
  for (int i = (blockIdx.x * THREADS + threadIdx.x) * VEC; i < n; i += gridDim.x * THREADS * VEC)
#pragma unroll
    for (int v = 0; v < VEC; ++v)
      if (i + v < n) y[i + v] = ktune_dev::from_float<TO>(a * ktune_dev::to_float(x[i + v]));
}

template <typename T, typename TO>
__global__ void ktune_scale_ref(const T* x, TO* y, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = ktune_dev::from_float<TO>(a * ktune_dev::to_float(x[i]));
}
