// A template whose configs misbehave on purpose, for the fault-isolation tests:
//   MODE 0: correct (y = 2x)     MODE 1: illegal address     MODE 2: never finishes
//   MODE 3: asks for too much shared memory (see the manifest)   MODE 4: wrong result
#include "ktune_common.cuh"

template <int THREADS, int MODE>
__global__ void __launch_bounds__(THREADS) ktune_fault(const float* x, float* y, int n, int* flag) {
  extern __shared__ float scratch[];
  const int i = blockIdx.x * THREADS + threadIdx.x;
  if (MODE == 1) {
    // An address no allocation owns.
    float* wild = reinterpret_cast<float*>(0x10ull << 40);
    wild[i] = 1.0f;
  }
  if (MODE == 2) {
    // Spin on a flag nobody sets; volatile keeps the loop.
    while (*reinterpret_cast<volatile int*>(flag) == 0) {
    }
  }
  if (MODE == 3) scratch[threadIdx.x] = 0;
  if (i < n) y[i] = 2.0f * x[i] + (MODE == 4 ? 1.0f : 0.0f);
}

__global__ void ktune_fault_ref(const float* x, float* y, int n, int*) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
