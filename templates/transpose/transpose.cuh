// transpose.cuh — out (cols x rows) = transpose of in (rows x cols), both row-major
// (ktune built-in template). out[c * rows + r] = in[r * cols + c]; a pure copy of element bits.
//
// A block moves one TILE_R x TILE_C tile of `in` through shared memory.
//   Phase 1: the tile is cut into VEC x VEC blocks. A thread loads one block as VEC row vectors of
//     VEC elements (for a fixed row, a warp's loads are contiguous: 32 * VEC elements), transposes
//     it in registers, and stores VEC column vectors into the shared tile, which is kept transposed:
//     TILE_C rows of TILE_R / VEC chunks, a chunk being VEC elements (VEC * sizeof(T) bytes).
//   Phase 2: each thread copies chunks of the shared tile to `out`, so every output row segment
//     is written with VEC-wide stores (16 bytes when VEC * sizeof(T) == 16).
// Shared-memory layout (SMEM_LAYOUT):
//   0: pad — each shared row has one extra chunk. At VEC == 1 this is the classic layout
//      (conflict-free for 4-byte elements, 2-way on some phase-1 stores for 2-byte ones); with
//      VEC > 1, phase-1 stores hit VEC-way bank conflicts.
//   1: XOR swizzle — chunk j of shared row c lives at j ^ ((c / VEC) % SWZ) where SWZ is the
//      number of chunks per 128 bytes (at most the row's chunk count). Both phases are conflict-free
//      when TILE_R * sizeof(T) >= 128 and TILE_C * sizeof(T) >= 128.
// Shared memory is static (no dynamic smem, no opt-in); tiles are kept <= 48 KiB by the manifest.
//
// ktune_transpose_ref is the reference: one thread per element.
#pragma once
#include "ktune_common.cuh"

namespace ktune_transpose_detail {

// Raw element bits: the transpose never converts.
template <int BYTES> struct Raw;
template <> struct Raw<2> { using type = unsigned short; };
template <> struct Raw<4> { using type = unsigned; };

// VEC elements moved as one access of VEC * sizeof(R) bytes.
template <typename R, int VEC> struct alignas(VEC * sizeof(R)) Chunk { R e[VEC]; };

}  // namespace ktune_transpose_detail

// REQUIRES: rows % VEC == 0, cols % VEC == 0, (TILE_R / VEC) * (TILE_C / VEC) % THREADS == 0.
// grid.x = ceil_div(cols, TILE_C) * ceil_div(rows, TILE_R) (tiles in row-major order, so
// consecutive blocks read neighbouring tiles of one band of rows), block.x = THREADS.
template <typename T_IN, typename T_OUT, int TILE_R, int TILE_C, int THREADS, int VEC,
          int SMEM_LAYOUT>
__global__ void __launch_bounds__(THREADS, 1)
    ktune_transpose(const T_IN* __restrict__ in, T_OUT* __restrict__ out, int rows, int cols) {
  using namespace ktune_transpose_detail;
  static_assert(sizeof(T_IN) == sizeof(T_OUT), "transpose copies bits: same element size");
  using R = typename Raw<sizeof(T_IN)>::type;
  using C = Chunk<R, VEC>;
  constexpr int kUR = TILE_R / VEC;          // VEC x VEC blocks down the tile = chunks per smem row
  constexpr int kUC = TILE_C / VEC;          // VEC x VEC blocks across the tile
  constexpr int kIt1 = kUR * kUC / THREADS;  // blocks per thread (phase 1)
  constexpr int kIt2 = TILE_C * kUR / THREADS;  // chunks per thread (phase 2)
  constexpr int kPad = SMEM_LAYOUT == 0 ? 1 : 0;
  constexpr int kStride = kUR + kPad;        // chunks per smem row
  constexpr int kPer128 = 128 / static_cast<int>(sizeof(C)) > 0 ? 128 / static_cast<int>(sizeof(C)) : 1;
  constexpr int kSwz = kPer128 < kUR ? kPer128 : kUR;
  static_assert(TILE_R % VEC == 0 && TILE_C % VEC == 0, "tile must be a multiple of VEC");
  static_assert(kIt1 * THREADS == kUR * kUC && kIt1 >= 1, "blocks must divide evenly over threads");
  static_assert((kSwz & (kSwz - 1)) == 0, "swizzle period must be a power of two");
  static_assert(SMEM_LAYOUT == 0 || SMEM_LAYOUT == 1, "SMEM_LAYOUT is 0 (pad) or 1 (swizzle)");
  __shared__ C tile[TILE_C * kStride];

  // Index of chunk j of shared row c.
  auto slot = [](int c, int j) {
    if constexpr (SMEM_LAYOUT == 1) return c * kStride + (j ^ ((c / VEC) & (kSwz - 1)));
    else return c * kStride + j;
  };

  const int col_tiles = (cols + TILE_C - 1) / TILE_C;
  const int r0 = static_cast<int>(blockIdx.x / col_tiles) * TILE_R;
  const int c0 = static_cast<int>(blockIdx.x % col_tiles) * TILE_C;
  const R* src = reinterpret_cast<const R*>(in);
  R* dst = reinterpret_cast<R*>(out);

  // Phase 1: global -> registers (all loads in flight first) -> shared, transposed.
  C e[kIt1][VEC];
#pragma unroll
  for (int it = 0; it < kIt1; ++it) {
    const int u = threadIdx.x + it * THREADS;
    const int r = r0 + (u / kUC) * VEC, c = c0 + (u % kUC) * VEC;
    if (r < rows && c < cols) {
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        e[it][i] = *reinterpret_cast<const C*>(src + static_cast<long long>(r + i) * cols + c);
    }
  }
#pragma unroll
  for (int it = 0; it < kIt1; ++it) {
    const int u = threadIdx.x + it * THREADS;
    const int ty = u / kUC, tx = u % kUC;
    if (r0 + ty * VEC < rows && c0 + tx * VEC < cols) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        C t;
#pragma unroll
        for (int i = 0; i < VEC; ++i) t.e[i] = e[it][i].e[k];
        tile[slot(tx * VEC + k, ty)] = t;
      }
    }
  }
  __syncthreads();

  // Phase 2: shared -> global; out row c0 + c, columns r0 + j * VEC ...
  C o[kIt2];
#pragma unroll
  for (int it = 0; it < kIt2; ++it) {
    const int u = threadIdx.x + it * THREADS;
    o[it] = tile[slot(u / kUR, u % kUR)];
  }
#pragma unroll
  for (int it = 0; it < kIt2; ++it) {
    const int u = threadIdx.x + it * THREADS;
    const int c = c0 + u / kUR, r = r0 + (u % kUR) * VEC;
    if (c < cols && r < rows)
      *reinterpret_cast<C*>(dst + static_cast<long long>(c) * rows + r) = o[it];
  }
}

// Reference: one thread per element, 1-D grid of ceil_div(rows * cols, blockDim.x) blocks.
template <typename T_IN, typename T_OUT>
__global__ void ktune_transpose_ref(const T_IN* __restrict__ in, T_OUT* __restrict__ out, int rows,
                                    int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * cols) return;
  const long long r = i / cols, c = i % cols;
  const typename ktune_transpose_detail::Raw<sizeof(T_IN)>::type* src =
      reinterpret_cast<const typename ktune_transpose_detail::Raw<sizeof(T_IN)>::type*>(in);
  auto* dst = reinterpret_cast<typename ktune_transpose_detail::Raw<sizeof(T_OUT)>::type*>(out);
  dst[c * rows + r] = src[i];
}
