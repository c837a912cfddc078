// rmsnorm.cuh — row-wise RMS normalization (ktune built-in template).
//
//   y[r, c] = x[r, c] * rsqrt(sum_c x[r, c]^2 / cols + eps) * gamma[c]          (fp32 math)
//
// Same structure as softmax.cuh: a block of THREADS threads works on ROWS_PER_BLOCK rows, each row
// owned by TPR = THREADS / ROWS_PER_BLOCK threads, every access VEC elements wide.
//
// MODE 0 (registers): the row is loaded once into NV * VEC floats per thread, one reduction, one
//   write.
// MODE 1 (two-pass): pass 1 streams the row in chunks of UNROLL vectors summing squares; pass 2
//   re-reads (mostly from L2), scales and writes. For rows too long to hold in registers.
//
// gamma has T_IN's type and is read per row (it stays in L1/L2).
// ktune_rmsnorm_ref is the reference: one block per row, fp64 sum of squares.
#pragma once
#include "ktune_rows.cuh"


// x, y: rows x cols row-major; gamma: cols. REQUIRES: cols % VEC == 0, THREADS / ROWS_PER_BLOCK a
// power of two; MODE 0: cols <= THREADS / ROWS_PER_BLOCK * VEC * NV.
// grid.x = ceil_div(rows, ROWS_PER_BLOCK), block.x = THREADS.
template <typename T_IN, typename T_OUT, int THREADS, int ROWS_PER_BLOCK, int VEC, int MODE,
          int UNROLL, int NV>
__global__ void __launch_bounds__(THREADS, 1)
    ktune_rmsnorm(const T_IN* __restrict__ x, const T_IN* __restrict__ gamma,
                  T_OUT* __restrict__ y, int rows, int cols, float eps) {
  using namespace ktune_rows;
  constexpr int TPR = THREADS / ROWS_PER_BLOCK;
  static_assert(THREADS % 32 == 0 && THREADS % ROWS_PER_BLOCK == 0, "bad block shape");
  static_assert((TPR & (TPR - 1)) == 0, "threads per row must be a power of two");
  static_assert(MODE == 0 || MODE == 1, "MODE is 0 (registers) or 1 (two-pass)");
  constexpr int kRed = TPR > 32 ? THREADS / 32 : 1;
  __shared__ float red[kRed];

  const int lane = threadIdx.x % TPR;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + threadIdx.x / TPR;
  const bool row_ok = row < rows;
  const T_IN* xr = x + (row_ok ? row : 0) * cols;
  T_OUT* yr = y + (row_ok ? row : 0) * cols;
  const float inv_cols = 1.f / static_cast<float>(cols);

  if constexpr (MODE == 0) {
    float v[NV][VEC];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * TPR + lane) * VEC;
      if (row_ok && c < cols) {
        load_vec<T_IN, VEC>(xr + c, v[i]);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[i][k] = 0.f;
      }
    }
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) q = fmaf(v[i][k], v[i][k], q);
    const float rstd = rsqrtf(group_sum<TPR>(q, red) * inv_cols + eps);

#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * TPR + lane) * VEC;
      if (row_ok && c < cols) {
        float g[VEC], o[VEC];
        load_vec<T_IN, VEC>(gamma + c, g);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] = v[i][k] * rstd * g[k];
        store_vec<T_OUT, VEC>(yr + c, o);
      }
    }
  } else {
    constexpr int kChunk = TPR * VEC * UNROLL;
    float q = 0.f;
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      float v[UNROLL][VEC];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + (u * TPR + lane) * VEC;
        if (row_ok && c < cols) {
          load_vec<T_IN, VEC>(xr + c, v[u]);
        } else {
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[u][k] = 0.f;
        }
      }
      float cq = 0.f;  // per chunk, so the running sum sees fewer, larger terms
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int k = 0; k < VEC; ++k) cq = fmaf(v[u][k], v[u][k], cq);
      q += cq;
    }
    const float rstd = rsqrtf(group_sum<TPR>(q, red) * inv_cols + eps);

    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      float v[UNROLL][VEC];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + (u * TPR + lane) * VEC;
        if (row_ok && c < cols) load_vec<T_IN, VEC>(xr + c, v[u]);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + (u * TPR + lane) * VEC;
        if (row_ok && c < cols) {
          float g[VEC];
          load_vec<T_IN, VEC>(gamma + c, g);
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[u][k] = v[u][k] * rstd * g[k];
          store_vec<T_OUT, VEC>(yr + c, v[u]);
        }
      }
    }
  }
}

// Reference: one block per row (blockDim.x a power of two, <= 1024), fp64 sum of squares.
template <typename T_IN, typename T_OUT>
__global__ void ktune_rmsnorm_ref(const T_IN* __restrict__ x, const T_IN* __restrict__ gamma,
                                  T_OUT* __restrict__ y, int rows, int cols, float eps) {
  __shared__ double red[1024];
  const int t = threadIdx.x;
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const T_IN* xr = x + row * cols;
  T_OUT* yr = y + row * cols;

  double acc = 0.0;
  for (int c = t; c < cols; c += blockDim.x) {
    const double v = ktune_dev::to_float(xr[c]);
    acc += v * v;
  }
  red[t] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  const double rstd = 1.0 / sqrt(red[0] / cols + static_cast<double>(eps));
  for (int c = t; c < cols; c += blockDim.x) {
    const double v = ktune_dev::to_float(xr[c]) * rstd * ktune_dev::to_float(gamma[c]);
    yr[c] = ktune_dev::from_float<T_OUT>(static_cast<float>(v));
  }
}
