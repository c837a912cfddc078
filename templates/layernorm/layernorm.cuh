// layernorm.cuh — row-wise layer normalization (ktune built-in template).
//
//   mean = sum_c x[r, c] / cols,  var = sum_c (x[r, c] - mean)^2 / cols
//   y[r, c] = (x[r, c] - mean) * rsqrt(var + eps) * gamma[c] + beta[c]          (fp32 math)
//
// Same structure as softmax.cuh: a block of THREADS threads works on ROWS_PER_BLOCK rows, each row
// owned by TPR = THREADS / ROWS_PER_BLOCK threads, every access VEC elements wide.
//
// MODE 0 (registers): the row is loaded once into NV * VEC floats per thread; mean, then the sum of
//   squared deviations from it (an exact two-pass variance over registers), then one write.
// MODE 1 (online): pass 1 streams the row in chunks of UNROLL vectors; each chunk's mean and
//   squared deviations are computed exactly and merged into the thread's running (n, mean, M2)
//   with Chan's formula, then merged across the group. Pass 2 re-reads (mostly from L2) and writes.
//
// gamma and beta have T_IN's type and are read per row (they stay in L1/L2).
// Merges happen in a fixed order and give bit-identical results on every thread of a row.
// ktune_layernorm_ref is the reference: one block per row, fp64 statistics.
#pragma once
#include "ktune_rows.cuh"

namespace ktune_layernorm_detail {

using namespace ktune_rows;

// Running statistics of a set of values: count, mean, sum of squared deviations from the mean.
struct Stats {
  float n, mean, m2;
};

// Chan et al.'s parallel merge of a (lower) and b (upper). Order matters for the rounding only;
// callers always pass the operands in the same order so every thread gets the same bits.
__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  const float n = a.n + b.n;
  const float fb = n > 0.f ? b.n / n : 0.f;
  const float d = b.mean - a.mean;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

__device__ __forceinline__ Stats shfl_merge(Stats s, int o) {
  Stats t;
  t.n = __shfl_xor_sync(0xffffffffu, s.n, o);
  t.mean = __shfl_xor_sync(0xffffffffu, s.mean, o);
  t.m2 = __shfl_xor_sync(0xffffffffu, s.m2, o);
  return (threadIdx.x & o) ? merge(t, s) : merge(s, t);
}

template <int TPR>
__device__ __forceinline__ Stats group_merge(Stats s, float* red_n, float* red_mean,
                                             float* red_m2) {
  constexpr int kW = TPR < 32 ? TPR : 32;
#pragma unroll
  for (int o = kW / 2; o > 0; o >>= 1) s = shfl_merge(s, o);
  if constexpr (TPR > 32) {
    constexpr int kNW = TPR / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
      red_n[warp] = s.n;
      red_mean[warp] = s.mean;
      red_m2[warp] = s.m2;
    }
    __syncthreads();
    const int src = (warp & ~(kNW - 1)) + (lane & (kNW - 1));
    s = {red_n[src], red_mean[src], red_m2[src]};
#pragma unroll
    for (int o = kNW / 2; o > 0; o >>= 1) s = shfl_merge(s, o);
  }
  return s;
}

}  // namespace ktune_layernorm_detail

// x, y: rows x cols row-major; gamma, beta: cols. REQUIRES: cols % VEC == 0, THREADS / ROWS_PER_BLOCK
// a power of two; MODE 0: cols <= THREADS / ROWS_PER_BLOCK * VEC * NV.
// grid.x = ceil_div(rows, ROWS_PER_BLOCK), block.x = THREADS.
template <typename T_IN, typename T_OUT, int THREADS, int ROWS_PER_BLOCK, int VEC, int MODE,
          int UNROLL, int NV>
__global__ void __launch_bounds__(THREADS, 1)
    ktune_layernorm(const T_IN* __restrict__ x, const T_IN* __restrict__ gamma,
                    const T_IN* __restrict__ beta, T_OUT* __restrict__ y, int rows, int cols,
                    float eps) {
  using namespace ktune_layernorm_detail;
  constexpr int TPR = THREADS / ROWS_PER_BLOCK;
  static_assert(THREADS % 32 == 0 && THREADS % ROWS_PER_BLOCK == 0, "bad block shape");
  static_assert((TPR & (TPR - 1)) == 0, "threads per row must be a power of two");
  static_assert(MODE == 0 || MODE == 1, "MODE is 0 (registers) or 1 (online)");
  constexpr int kRed = TPR > 32 ? THREADS / 32 : 1;
  __shared__ float red0[kRed], red1[kRed], red2[kRed];

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
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += v[i][k];
    const float mean = group_sum<TPR>(s, red0) * inv_cols;

    float q = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if ((i * TPR + lane) * VEC < cols) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float d = v[i][k] - mean;
          q += d * d;
        }
      }
    }
    const float var = group_sum<TPR>(q, red1) * inv_cols;
    const float rstd = rsqrtf(var + eps);

#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * TPR + lane) * VEC;
      if (row_ok && c < cols) {
        float g[VEC], b[VEC], o[VEC];
        load_vec<T_IN, VEC>(gamma + c, g);
        load_vec<T_IN, VEC>(beta + c, b);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] = (v[i][k] - mean) * rstd * g[k] + b[k];
        store_vec<T_OUT, VEC>(yr + c, o);
      }
    }
  } else {
    constexpr int kChunk = TPR * VEC * UNROLL;
    Stats st = {0.f, 0.f, 0.f};
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      float v[UNROLL][VEC];
      int valid = 0;  // vectors of this chunk inside the row
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + (u * TPR + lane) * VEC;
        if (row_ok && c < cols) {
          load_vec<T_IN, VEC>(xr + c, v[u]);
          ++valid;
        } else {
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[u][k] = 0.f;
        }
      }
      if (valid > 0) {
        const float cn = static_cast<float>(valid * VEC);
        float cs = 0.f;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cs += v[u][k];
        const float cm = cs / cn;
        float cq = 0.f;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          if (u < valid) {  // valid vectors are a prefix of the chunk
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
              const float d = v[u][k] - cm;
              cq += d * d;
            }
          }
        }
        st = merge(st, Stats{cn, cm, cq});
      }
    }
    st = group_merge<TPR>(st, red0, red1, red2);
    const float mean = st.mean;
    const float rstd = rsqrtf(st.m2 * inv_cols + eps);

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
          float g[VEC], b[VEC];
          load_vec<T_IN, VEC>(gamma + c, g);
          load_vec<T_IN, VEC>(beta + c, b);
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[u][k] = (v[u][k] - mean) * rstd * g[k] + b[k];
          store_vec<T_OUT, VEC>(yr + c, v[u]);
        }
      }
    }
  }
}

// Reference: one block per row (blockDim.x a power of two, <= 1024); mean and variance in fp64,
// two passes.
template <typename T_IN, typename T_OUT>
__global__ void ktune_layernorm_ref(const T_IN* __restrict__ x, const T_IN* __restrict__ gamma,
                                    const T_IN* __restrict__ beta, T_OUT* __restrict__ y,
                                    int rows, int cols, float eps) {
  __shared__ double red[1024];
  const int t = threadIdx.x;
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const T_IN* xr = x + row * cols;
  T_OUT* yr = y + row * cols;

  double acc = 0.0;
  for (int c = t; c < cols; c += blockDim.x) acc += ktune_dev::to_float(xr[c]);
  red[t] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  const double mean = red[0] / cols;
  __syncthreads();

  acc = 0.0;
  for (int c = t; c < cols; c += blockDim.x) {
    const double d = ktune_dev::to_float(xr[c]) - mean;
    acc += d * d;
  }
  red[t] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  const double rstd = 1.0 / sqrt(red[0] / cols + static_cast<double>(eps));
  for (int c = t; c < cols; c += blockDim.x) {
    const double v = (ktune_dev::to_float(xr[c]) - mean) * rstd * ktune_dev::to_float(gamma[c]) +
                     ktune_dev::to_float(beta[c]);
    yr[c] = ktune_dev::from_float<T_OUT>(static_cast<float>(v));
  }
}
