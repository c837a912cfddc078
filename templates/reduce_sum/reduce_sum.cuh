// reduce_sum.cuh — sum of n floats in one launch (ktune built-in template).
//
// A grid of about sm_count * BLOCKS_PER_SM blocks (all resident at once: __launch_bounds__ asks
// ptxas for BLOCKS_PER_SM blocks per SM) strides over x with VEC-wide loads (16 bytes at VEC = 4),
// UNROLL independent loads in flight per thread before any is used. Each thread keeps VEC
// accumulators and adds each group of UNROLL loads as a small pairwise tree; the block reduces
// through shuffles and shared memory and writes one partial. The last block to finish (counted
// with an atomic on `counter` after a __threadfence) sums the partials in a fixed order, writes
// out[0], and zeroes the partials and the counter again, so the workspace reads zero after every
// launch. All orders are fixed for a given grid: results are deterministic run to run.
//
// ktune_reduce_sum_ref is the reference: one block, fp64 accumulation.
#pragma once
#include "ktune_common.cuh"

namespace ktune_reduce_sum_detail {

template <int N> struct alignas(4 * N) Words { unsigned w[N]; };

template <int VEC>
__device__ __forceinline__ void load_vec(const float* p, float (&f)[VEC]) {
  const Words<VEC> r = *reinterpret_cast<const Words<VEC>*>(p);
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = __uint_as_float(r.w[i]);
}

// Reads a value another block wrote: a volatile load is not served from a possibly stale L1 line.
__device__ __forceinline__ float load_other_block(const float* p) {
  return *static_cast<const volatile float*>(p);
}

// Sum over the block; the result is valid in thread 0. Uses red[THREADS / 32] and two barriers.
template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* red) {
  constexpr int kWarps = THREADS / 32;
  v = ktune_dev::warp_sum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? red[lane] : 0.f;
    v = ktune_dev::warp_sum(v);
  }
  __syncthreads();  // red may be reused by the caller
  return v;
}

}  // namespace ktune_reduce_sum_detail

// out[0] = sum(x[0..n)). partials (>= gridDim.x floats) and counter (1 int) are zero on entry and
// are zero again on return. REQUIRES: x aligned to 16 bytes (any n), gridDim.x <= partials' count.
template <typename T_IN, typename T_OUT, int THREADS, int VEC, int UNROLL, int BLOCKS_PER_SM>
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
    ktune_reduce_sum(const T_IN* __restrict__ x, T_OUT* __restrict__ out, float* partials,
                     int* counter, long long n) {
  using namespace ktune_reduce_sum_detail;
  static_assert(sizeof(T_IN) == 4 && sizeof(T_OUT) == 4, "fp32 only");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "bad block size");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4");
  static_assert(BLOCKS_PER_SM >= 1, "grid = sm_count * BLOCKS_PER_SM, all resident at once");
  __shared__ float red[THREADS / 32];
  __shared__ bool is_last;

  const long long nvec = n / VEC;
  const long long stride = static_cast<long long>(gridDim.x) * THREADS;
  const long long gtid = static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x;
  const float* xf = reinterpret_cast<const float*>(x);

  float acc[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = 0.f;

  long long i = gtid;
  for (; i + (UNROLL - 1) * stride < nvec; i += UNROLL * stride) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load_vec<VEC>(xf + (i + u * stride) * VEC, v[u]);
#pragma unroll
    for (int w = 1; w < UNROLL; w *= 2)
#pragma unroll
      for (int u = 0; u + w < UNROLL; u += 2 * w)
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[u][k] += v[u + w][k];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += v[0][k];
  }
  for (; i < nvec; i += stride) {
    float v[VEC];
    load_vec<VEC>(xf + i * VEC, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += v[k];
  }
  if (nvec * VEC + gtid < n) acc[0] += xf[nvec * VEC + gtid];  // the n % VEC tail

#pragma unroll
  for (int w = 1; w < VEC; w *= 2)
#pragma unroll
    for (int k = 0; k + w < VEC; k += 2 * w) acc[k] += acc[k + w];

  const float block_total = block_sum<THREADS>(acc[0], red);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block_total;
    __threadfence();  // publish the partial before counting this block as done
    is_last = atomicAdd(counter, 1) == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (!is_last) return;

  __threadfence();
  float s = 0.f;
  for (int b = threadIdx.x; b < static_cast<int>(gridDim.x); b += THREADS) {
    s += load_other_block(partials + b);
    partials[b] = 0.f;  // self-cleaning workspace: each slot is read and cleared by one thread
  }
  s = block_sum<THREADS>(s, red);
  if (threadIdx.x == 0) {
    out[0] = s;
    *counter = 0;
  }
}

// Reference: one block (blockDim.x a power of two, <= 1024), fp64 accumulation. Leaves partials
// and counter alone.
template <typename T_IN, typename T_OUT>
__global__ void ktune_reduce_sum_ref(const T_IN* __restrict__ x, T_OUT* __restrict__ out,
                                     float* partials, int* counter, long long n) {
  __shared__ double red[1024];
  const int t = threadIdx.x;
  double acc = 0.0;
  for (long long i = t; i < n; i += blockDim.x) acc += x[i];
  red[t] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  if (t == 0) out[0] = static_cast<float>(red[0]);
  (void)partials;
  (void)counter;
}
