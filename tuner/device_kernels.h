// Source of the worker's own device kernels: filling inputs with random data (never zeros),
// poisoning outputs, and comparing outputs with the reference. Compiled by NVRTC in the worker
// for the GPU it owns, once at start (~0.3 s).
#pragma once

namespace ktune {

inline constexpr const char* k_device_kernels_source = R"CUDA(
typedef unsigned long long u64;

__device__ __forceinline__ unsigned hash32(u64 i, unsigned seed) {
  // splitmix64 finaliser over (index, seed): independent per element, reproducible per seed.
  u64 z = i * 0x9E3779B97F4A7C15ull + (u64(seed) << 32) + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return unsigned(z ^ (z >> 31));
}
__device__ __forceinline__ float unit(unsigned h) { return (h >> 8) * (1.0f / 16777216.0f); }  // [0,1)

__device__ __forceinline__ float draw(u64 i, unsigned seed, int kind, float a, float b) {
  if (kind == 0) return a + (b - a) * unit(hash32(i, seed));            // uniform(a, b)
  float u1 = fmaxf(unit(hash32(i, seed)), 1e-7f), u2 = unit(hash32(i, seed ^ 0x5bd1e995u));
  return a + b * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);      // normal(a, b)
}

__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned short r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;
}
__device__ __forceinline__ unsigned short f2h(float f) {
  unsigned short r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;
}
__device__ __forceinline__ float bf2f(unsigned short v) { return __uint_as_float(unsigned(v) << 16); }
__device__ __forceinline__ float h2f(unsigned short v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f; }

// One thread: waits for a tick of the GPU's nanosecond timer (%globaltimer), then counts SM
// cycles (%clock64) over window_ns of it: out = {ns, cycles, start}. The clock the SMs run at,
// where NVML's read can lag a short timing by tens of ms (bench/NOTES.md, 2026-12-05). A timer
// that does not tick within 2^30 cycles (~0.5 s) ends it with out[0] = 0: no clock, no hang.
extern "C" __global__ void ktune_clock_probe(u64* out, u64 window_ns) {
  const u64 k_cap = 1ull << 30;
  u64 t, t0, t1, c, c0, c1, start;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(start));
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  } while (t0 == t && c - start < k_cap);
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1));
  } while (t1 - t0 < window_ns && c1 - start < 2 * k_cap);
  out[0] = t1 - t0 >= window_ns ? t1 - t0 : 0;
  out[1] = c1 - c0;
  out[2] = t0;
}

// dtype: 0 bf16, 1 fp16, 2 fp32, 3 i32
extern "C" __global__ void ktune_fill(void* p, u64 n, int dtype, unsigned seed, int kind, float a, float b) {
  for (u64 i = blockIdx.x * u64(blockDim.x) + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) {
    float v = draw(i, seed, kind, a, b);
    if (v == 0.0f) v = 0.5f * (a + b) + 1e-3f;  // never an exact zero
    if (dtype == 0) ((unsigned short*)p)[i] = f2bf(v);
    else if (dtype == 1) ((unsigned short*)p)[i] = f2h(v);
    else if (dtype == 2) ((float*)p)[i] = v;
    else ((int*)p)[i] = int(floorf(v));
  }
}

extern "C" __global__ void ktune_poison(void* p, u64 n, int dtype) {
  for (u64 i = blockIdx.x * u64(blockDim.x) + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) {
    if (dtype == 0) ((unsigned short*)p)[i] = 0x7FC0;        // bf16 NaN
    else if (dtype == 1) ((unsigned short*)p)[i] = 0x7E00;   // fp16 NaN
    else if (dtype == 2) ((unsigned*)p)[i] = 0x7FC00000u;    // fp32 NaN
    else ((int*)p)[i] = int(0x80000001);                     // i32: an unlikely value
  }
}

__device__ __forceinline__ float load_as_float(const void* p, u64 i, int dtype) {
  if (dtype == 0) return bf2f(((const unsigned short*)p)[i]);
  if (dtype == 1) return h2f(((const unsigned short*)p)[i]);
  if (dtype == 2) return ((const float*)p)[i];
  return float(((const int*)p)[i]);
}

// acc[0] += sum (out - ref)^2, acc[1] += sum ref^2, acc[2] += count of non-finite outputs.
extern "C" __global__ void ktune_compare(const void* out, const void* ref, u64 n, int dtype, double* acc) {
  double d2 = 0, r2 = 0, bad = 0;
  for (u64 i = blockIdx.x * u64(blockDim.x) + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) {
    const float o = load_as_float(out, i, dtype), r = load_as_float(ref, i, dtype);
    if (!isfinite(o)) { bad += 1; continue; }
    const double d = double(o) - double(r);
    d2 += d * d;
    r2 += double(r) * double(r);
  }
  for (int off = 16; off > 0; off >>= 1) {
    d2 += __shfl_xor_sync(0xffffffffu, d2, off);
    r2 += __shfl_xor_sync(0xffffffffu, r2, off);
    bad += __shfl_xor_sync(0xffffffffu, bad, off);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&acc[0], d2);
    atomicAdd(&acc[1], r2);
    atomicAdd(&acc[2], bad);
  }
}
)CUDA";

}  // namespace ktune
