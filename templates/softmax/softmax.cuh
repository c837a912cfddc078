// softmax.cuh — row-wise softmax over the last dimension (ktune built-in template).
//
//   y[r, c] = exp(x[r, c] - max_c x[r, :]) / sum_c exp(x[r, c] - max_c x[r, :])     (fp32 math)
//
// A block of THREADS threads works on ROWS_PER_BLOCK rows at once; each row belongs to a group of
// TPR = THREADS / ROWS_PER_BLOCK threads (a part of a warp, a warp, or several warps). Every access
// is VEC elements wide (16 bytes when VEC * sizeof(T) == 16); for a fixed step the group's accesses
// are contiguous, so each warp instruction moves whole 128-byte lines.
//
// MODE 0 (registers): the row is loaded once into NV * VEC floats per thread (NV is derived from
//   cols by the manifest), reduced, exponentiated in place and written: one read + one write.
// MODE 1 (online): the row is streamed twice in chunks of UNROLL vectors per thread. The first
//   pass keeps a running max and a rescaled running sum; the second re-reads (mostly from L2) and
//   writes. For rows too long to hold in registers.
//
// Reductions: shuffles within a warp; groups wider than a warp add one shared-memory step and one
// __syncthreads (every thread of the block reaches it; rows past `rows` only skip memory accesses).
// Summation order is fixed, so results are deterministic run to run.
//
// ktune_softmax_ref is the reference: one block per row, accurate expf, sums in double.
#pragma once
#include "ktune_rows.cuh"


// x, y: rows x cols, row-major. REQUIRES: cols % VEC == 0, THREADS % ROWS_PER_BLOCK == 0 with
// THREADS / ROWS_PER_BLOCK a power of two; MODE 0: cols <= THREADS / ROWS_PER_BLOCK * VEC * NV.
// grid.x = ceil_div(rows, ROWS_PER_BLOCK), block.x = THREADS.
template <typename T_IN, typename T_OUT, int THREADS, int ROWS_PER_BLOCK, int VEC, int MODE,
          int UNROLL, int NV>
__global__ void __launch_bounds__(THREADS, 1)
    ktune_softmax(const T_IN* __restrict__ x, T_OUT* __restrict__ y, int rows, int cols) {
  using namespace ktune_rows;
  constexpr int TPR = THREADS / ROWS_PER_BLOCK;  // threads per row
  static_assert(THREADS % 32 == 0 && THREADS % ROWS_PER_BLOCK == 0, "bad block shape");
  static_assert((TPR & (TPR - 1)) == 0, "threads per row must be a power of two");
  static_assert(MODE == 0 || MODE == 1, "MODE is 0 (registers) or 1 (online)");
  constexpr int kRed = TPR > 32 ? THREADS / 32 : 1;
  __shared__ float red_max[kRed], red_sum[kRed];

  const int lane = threadIdx.x % TPR;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + threadIdx.x / TPR;
  const bool row_ok = row < rows;
  const T_IN* xr = x + (row_ok ? row : 0) * cols;
  T_OUT* yr = y + (row_ok ? row : 0) * cols;

  if constexpr (MODE == 0) {
    float v[NV][VEC];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * TPR + lane) * VEC;
      if (row_ok && c < cols) {
        load_vec<T_IN, VEC>(xr + c, v[i]);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[i][k] = neg_inf();
      }
    }
    float m = v[0][0];
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[i][k]);
    m = group_reduce<TPR, true>(m, red_max);

    float s = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[i][k] = ktune_dev::fast_exp(v[i][k] - m);  // padding: exp(-inf) = 0
        s += v[i][k];
      }
    s = group_reduce<TPR, false>(s, red_sum);
    const float inv = 1.f / s;

#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * TPR + lane) * VEC;
      if (row_ok && c < cols) {
        float o[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] = v[i][k] * inv;
        store_vec<T_OUT, VEC>(yr + c, o);
      }
    }
  } else {
    constexpr int kChunk = TPR * VEC * UNROLL;
    // Pass 1: running max m and sum s of exp(x - m) over this thread's elements.
    float m = neg_inf(), s = 0.f;
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      float v[UNROLL][VEC];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + (u * TPR + lane) * VEC;
        if (row_ok && c < cols) {
          load_vec<T_IN, VEC>(xr + c, v[u]);
        } else {
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[u][k] = neg_inf();
        }
      }
      float cm = v[0][0];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int k = 0; k < VEC; ++k) cm = fmaxf(cm, v[u][k]);
      if (cm > m) {  // rescale; s == 0 while m == -inf, and exp(-inf) == 0
        s *= ktune_dev::fast_exp(m - cm);
        m = cm;
      }
      if (m != neg_inf()) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
          for (int k = 0; k < VEC; ++k) s += ktune_dev::fast_exp(v[u][k] - m);
      }
    }
    const float gm = group_reduce<TPR, true>(m, red_max);
    s = (m == neg_inf()) ? 0.f : s * ktune_dev::fast_exp(m - gm);
    s = group_reduce<TPR, false>(s, red_sum);
    const float inv = 1.f / s;

    // Pass 2: re-read (the row was just read: mostly L2 hits), normalize, write.
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
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[u][k] = ktune_dev::fast_exp(v[u][k] - gm) * inv;
          store_vec<T_OUT, VEC>(yr + c, v[u]);
        }
      }
    }
  }
}

// Reference: one block per row (blockDim.x a power of two, <= 1024), accurate expf, fp64 sums.
template <typename T_IN, typename T_OUT>
__global__ void ktune_softmax_ref(const T_IN* __restrict__ x, T_OUT* __restrict__ y, int rows,
                                  int cols) {
  __shared__ float smax[1024];
  __shared__ double ssum[1024];
  const int t = threadIdx.x;
  const long long row = blockIdx.x;
  if (row >= rows) return;  // whole block leaves together
  const T_IN* xr = x + row * cols;
  T_OUT* yr = y + row * cols;

  float m = ktune_rows::neg_inf();
  for (int c = t; c < cols; c += blockDim.x) m = fmaxf(m, ktune_dev::to_float(xr[c]));
  smax[t] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) smax[t] = fmaxf(smax[t], smax[t + s]);
    __syncthreads();
  }
  m = smax[0];

  double acc = 0.0;
  for (int c = t; c < cols; c += blockDim.x) acc += expf(ktune_dev::to_float(xr[c]) - m);
  ssum[t] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) ssum[t] += ssum[t + s];
    __syncthreads();
  }
  const double total = ssum[0];
  for (int c = t; c < cols; c += blockDim.x)
    yr[c] = ktune_dev::from_float<T_OUT>(
        static_cast<float>(expf(ktune_dev::to_float(xr[c]) - m) / total));
}
