// ktune_rows.cuh — helpers shared by the row-wise templates (softmax, layernorm, rmsnorm):
// one-access vector loads and stores with conversion to float, and reductions over the group of
// threads that owns a row. Header-free like ktune_common.cuh, which it builds on.
#pragma once
#include "ktune_common.cuh"

namespace ktune_rows {

template <int N> struct alignas(4 * N) Words { unsigned w[N]; };

// Loads VEC consecutive elements (aligned to VEC * sizeof(T) bytes) as one access.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[VEC]) {
  constexpr int kBytes = VEC * static_cast<int>(sizeof(T));
  if constexpr (kBytes >= 4) {
    const Words<kBytes / 4> r = *reinterpret_cast<const Words<kBytes / 4>*>(p);
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      if constexpr (sizeof(T) == 4) f[i] = __uint_as_float(r.w[i]);
      else ktune_dev::unpack2<T>(r.w[i], f[2 * i], f[2 * i + 1]);
    }
  } else {
    f[0] = ktune_dev::to_float(p[0]);
  }
}

// Stores VEC floats converted to T as one access.
template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[VEC]) {
  constexpr int kBytes = VEC * static_cast<int>(sizeof(T));
  if constexpr (kBytes >= 4) {
    Words<kBytes / 4> r;
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      if constexpr (sizeof(T) == 4) r.w[i] = __float_as_uint(f[i]);
      else r.w[i] = ktune_dev::pack2<T>(f[2 * i], f[2 * i + 1]);
    }
    *reinterpret_cast<Words<kBytes / 4>*>(p) = r;
  } else {
    p[0] = ktune_dev::from_float<T>(f[0]);
  }
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <bool kMax> __device__ __forceinline__ float combine(float a, float b) {
  return kMax ? fmaxf(a, b) : a + b;
}

// Reduces v (sum, or max when kMax) over the TPR threads of this thread's row group; every thread
// of the group gets the same value. Groups wider than a warp go through red[THREADS / 32] and one
// __syncthreads, so the whole block must call this, and each call site needs its own `red`.
template <int TPR, bool kMax = false>
__device__ __forceinline__ float group_reduce(float v, float* red) {
  constexpr int kW = TPR < 32 ? TPR : 32;
#pragma unroll
  for (int o = kW / 2; o > 0; o >>= 1) v = combine<kMax>(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (TPR > 32) {
    constexpr int kNW = TPR / 32;  // warps per group
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[(warp & ~(kNW - 1)) + (lane & (kNW - 1))];
#pragma unroll
    for (int o = kNW / 2; o > 0; o >>= 1) v = combine<kMax>(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

template <int TPR>
__device__ __forceinline__ float group_sum(float v, float* red) {
  return group_reduce<TPR, false>(v, red);
}

}  // namespace ktune_rows
