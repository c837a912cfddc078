// ktune_common.cuh — the small device vocabulary every built-in template shares.
//
// Header-free on purpose: NVRTC compiles a template that includes only this file in ~0.3 s,
// where <cuda_bf16.h> and CCCL headers cost ~1 s each (docs/templates.md). Element types are
// 16-bit storage structs; conversions go through PTX cvt instructions (sm_80+).
// The compiler (tuner/compiler) passes this file to NVRTC as the in-memory header
// "ktune_common.cuh"; a template includes it with #include "ktune_common.cuh".
#pragma once

// Storage types. Distinct structs so a template can be instantiated per dtype.
struct __align__(2) ktune_bf16 { unsigned short bits; };
struct __align__(2) ktune_fp16 { unsigned short bits; };

namespace ktune_dev {

// ---- conversions -------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(ktune_bf16 v) {
  return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
}
__device__ __forceinline__ float to_float(ktune_fp16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ ktune_bf16 from_float<ktune_bf16>(float v) {
  ktune_bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <> __device__ __forceinline__ ktune_fp16 from_float<ktune_fp16>(float v) {
  ktune_fp16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

// Two floats packed into one 32-bit register of two 16-bit values (lo = a, hi = b).
template <typename T> __device__ __forceinline__ unsigned pack2(float a, float b);
template <> __device__ __forceinline__ unsigned pack2<ktune_bf16>(float a, float b) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
}
template <> __device__ __forceinline__ unsigned pack2<ktune_fp16>(float a, float b) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
}

// Unpacks a 32-bit register of two 16-bit values into floats.
template <typename T> __device__ __forceinline__ void unpack2(unsigned v, float& lo, float& hi);
template <> __device__ __forceinline__ void unpack2<ktune_bf16>(unsigned v, float& lo, float& hi) {
  lo = __uint_as_float(v << 16);
  hi = __uint_as_float(v & 0xffff0000u);
}
template <> __device__ __forceinline__ void unpack2<ktune_fp16>(unsigned v, float& lo, float& hi) {
  unsigned short l = static_cast<unsigned short>(v & 0xffff), h = static_cast<unsigned short>(v >> 16);
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(l));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(h));
}

// ---- warp reductions ---------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ---- small helpers -----------------------------------------------------------------------
__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Fast exp via ex2.approx: exp(x) = 2^(x * log2(e)).
__device__ __forceinline__ float fast_exp(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
  return r;
}

}  // namespace ktune_dev
