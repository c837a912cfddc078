// ktune_gemm_store.cuh — the masked C store both GEMM templates (gemm, gemm_sm90) end with:
// two adjacent outputs of C = alpha * acc + beta * C, as one 4- or 8-byte store when aligned.
// Header-free like ktune_common.cuh, which it builds on.
#pragma once
#include "ktune_common.cuh"

namespace ktune_gemm_store {

// Stores two adjacent outputs (row, col), (row, col+1) of C = alpha*acc + beta*C, masked.
template <typename TOut>
__device__ __forceinline__ void store_pair(TOut* __restrict__ C, int M, int N, int row, int col,
                                           float v0, float v1, float alpha, float beta, bool vec_ok) {
  if (row >= M || col >= N) return;
  TOut* p = C + static_cast<long long>(row) * N + col;
  v0 *= alpha;
  v1 *= alpha;
  if (vec_ok && col + 1 < N) {  // both in range and the pair is aligned (N even)
    if constexpr (sizeof(TOut) == 4) {
      float2* q = reinterpret_cast<float2*>(p);
      if (beta != 0.0f) {
        const float2 o = *q;
        v0 += beta * o.x;
        v1 += beta * o.y;
      }
      *q = make_float2(v0, v1);
    } else {
      unsigned* q = reinterpret_cast<unsigned*>(p);
      if (beta != 0.0f) {
        float o0, o1;
        ktune_dev::unpack2<TOut>(*q, o0, o1);
        v0 += beta * o0;
        v1 += beta * o1;
      }
      *q = ktune_dev::pack2<TOut>(v0, v1);
    }
  } else {
    if (beta != 0.0f) v0 += beta * ktune_dev::to_float(p[0]);
    p[0] = ktune_dev::from_float<TOut>(v0);
    if (col + 1 < N) {
      if (beta != 0.0f) v1 += beta * ktune_dev::to_float(p[1]);
      p[1] = ktune_dev::from_float<TOut>(v1);
    }
  }
}

}  // namespace ktune_gemm_store
