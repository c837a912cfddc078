// gemm.cuh — ktune's built-in tensor-core GEMM for sm_80+ (Ampere-style: mma.sync + ldmatrix +
// cp.async multistage pipeline). Computes C = alpha * A * B + beta * C with fp32 accumulation.
//
//   A: M x K, row-major (A_ROW=1, A[m*K+k]) or column-major (A_ROW=0, A[k*M+m])
//   B: K x N, row-major (B_ROW=1, B[k*N+n]) or column-major (B_ROW=0, B[n*K+k], nn.Linear weight)
//   C: M x N, row-major. Never read when beta == 0.
//
// Header-free: only "ktune_common.cuh" (NVRTC: 0.2-1 s per config, mostly ptxas). Every tensor-core,
// shared-memory and async-copy instruction is inline PTX. The manifest gemm.yaml states the
// parameter space, the constraints a config must meet and the exact dynamic shared memory size;
// keep GemmConfig::kSmemBytes and the manifest's `smem` in step.
//
// Structure of one thread block (BLOCK_M x BLOCK_N output tile, WARPS_M x WARPS_N warps):
//   1. Raster: blockIdx.x -> (tile_m, tile_n), grouped by GROUP_M tile rows for L2 reuse.
//      blockIdx.z picks a contiguous K slice when SPLIT_K > 1.
//   2. Main loop: STAGES-deep ring of shared-memory stages filled with 16-byte cp.async
//      (zero-filled out of bounds); each warp loads its A/B fragments with ldmatrix (.trans where
//      the operand's K is not the contiguous dimension) and issues mma.sync.m16n8k16 into fp32
//      accumulators. Fragments are double-buffered: the next k16 step's A and B are loaded while
//      this step computes. Copies of a k-tile are spread over its k16 steps (over the first half
//      of them with two stages, since the barrier closing the k-tile waits for them).
//   3. Epilogue: each warp stages its accumulators through shared memory, 8 rows at a time, and
//      writes C row-contiguously (4 elements per lane: 8-byte bf16/fp16 or 16-byte fp32 stores,
//      masked at the tails). With SPLIT_K > 1 every split writes an fp32 partial tile to
//      `workspace` the same way; the last split to arrive at a tile (atomic ticket in
//      `tile_counters`) sums the partials, writes C and resets the ticket to zero, so the counters
//      are zero again when the kernel returns.
//
// Shared-memory layout of an operand tile: a ROWS x COLS row-major array of 16-bit elements whose
// COLS is the operand's contiguous global dimension (K for row-major A, M for column-major A, ...).
// SWIZZLE=0 pads each row by 8 elements (16 bytes); SWIZZLE=1 keeps rows dense and XORs the
// 16-byte chunk index with a function of (row % 8). Both make every 8-row ldmatrix phase hit 8
// distinct 16-byte bank groups.
//
// The index math lives in host+device functions of GemmConfig so a host-side emulation
// (bench/kernel_check/gemm_layout_test.cu) can check it without a GPU.
#ifndef KTUNE_GEMM_CUH_
#define KTUNE_GEMM_CUH_

#include "ktune_common.cuh"
#include "ktune_gemm_store.cuh"

#define KTUNE_GEMM_HD __host__ __device__ __forceinline__

namespace ktune_gemm_detail {

using ktune_gemm_store::store_pair;

// ---- shared-memory layout of one operand tile ----------------------------------------------
template <int ROWS, int COLS, int SWIZZLE>
struct SmemLayout {
  static_assert(COLS % 16 == 0 && COLS <= 256, "contiguous tile extent must be 16..256 elements");
  static constexpr int kChunks = COLS / 8;                            // 16-byte chunks per row
  static constexpr int kStrideBytes = (COLS + (SWIZZLE ? 0 : 8)) * 2;  // bytes between rows
  static constexpr int kBytes = ROWS * kStrideBytes;
  // Rows sharing one 128-byte line and the span of the XOR key: their product is 8, so the key
  // depends only on row % 8 and any 8 consecutive rows at one logical chunk land in 8 distinct
  // 16-byte bank groups.
  static constexpr int kRowsPerLine = kChunks >= 8 ? 1 : 8 / kChunks;

  // XOR key of a row (0 when not swizzled). Depends only on row % 8.
  static KTUNE_GEMM_HD int key(int row) { return SWIZZLE ? (row & 7) / kRowsPerLine : 0; }
  // Byte offset of logical 16-byte chunk `chunk` of row `row`, given key(row).
  static KTUNE_GEMM_HD unsigned offset(int row, int chunk, int row_key) {
    return static_cast<unsigned>(row * kStrideBytes + ((chunk ^ row_key) << 4));
  }
  static KTUNE_GEMM_HD unsigned offset(int row, int chunk) { return offset(row, chunk, key(row)); }
};

// ---- PTX wrappers ------------------------------------------------------------------------------
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// 16-byte async copy global -> shared; copies zeros when !valid (src-size 0, nothing is read).
// L2_PREFETCH: 0 = no hint, 128 / 256 = .L2::128B / .L2::256B prefetch hint.
template <int L2_PREFETCH>
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  if constexpr (L2_PREFETCH == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
  } else if constexpr (L2_PREFETCH == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b for one m16n8k16 tile; a: 4 regs (row-major A fragment), b: 2 regs (col-major B).
template <typename T> struct Mma;
template <> struct Mma<ktune_bf16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct Mma<ktune_fp16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// L1-bypassing loads of split-K partials written by other blocks.
__device__ __forceinline__ float ld_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void ld_cg2(const float* p, float& x, float& y) {
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(p));
}
__device__ __forceinline__ float4 ld_cg4(const float* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

// ---- global -> shared tile copier for one operand --------------------------------------------
// The global operand is seen as a g_rows x g_cols row-major matrix (g_cols contiguous); the tile
// at (row_origin, col_origin) is ROWS x COLS. K runs along rows when K_ROWS, else along columns.
// REQUIRES: g_cols % 8 == 0 (every 16-byte chunk is entirely inside or outside the matrix).
// Host+device so the layout test can drive it; only copy() issues PTX.
template <typename T, typename Map, typename Layout, int ROWS, bool K_ROWS, int BLOCK_K>
struct TileCopier {
  const T* base;           // the operand; a valid address for masked-off copies
  const T* ptr;            // this thread's item 0 in the next k-tile to copy
  long long item_stride;   // elements between this thread's items (Map::kRowStep rows)
  long long tile_stride;   // elements between consecutive k-tiles
  int rows_left;           // global rows left from item 0's row (item j valid while j*step < it)
  int cols_left;           // global columns left from this thread's chunk
  int row0;                // item 0's row in the tile
  int chunk;               // this thread's 16-byte chunk column in the tile
  unsigned smem_row0;      // byte offset of item 0's row in the operand tile
  // Item j's rows repeat their XOR key every kKeyPeriod items (keys depend on row % 8 only):
  // xor_off[j % kKeyPeriod] is item j's swizzled chunk offset within its row.
  static constexpr int kKeyPeriod = 8 / (Map::kRowStep & -Map::kRowStep) > 1
                                        ? 8 / (Map::kRowStep & -Map::kRowStep) : 1;
  unsigned xor_off[kKeyPeriod];

  KTUNE_GEMM_HD TileCopier(const T* b, int g_rows, int g_cols, int row_origin, int col_origin,
                           int tid) {
    base = b;
    row0 = Map::row(tid, 0);
    chunk = Map::chunk(tid);
    ptr = b + static_cast<long long>(row_origin + row0) * g_cols + col_origin + chunk * 8;
    item_stride = static_cast<long long>(Map::kRowStep) * g_cols;
    tile_stride = K_ROWS ? static_cast<long long>(BLOCK_K) * g_cols : BLOCK_K;
    rows_left = g_rows - (row_origin + row0);
    cols_left = g_cols - (col_origin + chunk * 8);
    smem_row0 = static_cast<unsigned>(row0 * Layout::kStrideBytes);
#pragma unroll
    for (int q = 0; q < kKeyPeriod; ++q)
      xor_off[q] = Layout::offset(0, chunk, Layout::key(row0 + q * Map::kRowStep));
  }

  KTUNE_GEMM_HD unsigned item_smem(int j) const {
    return smem_row0 + static_cast<unsigned>(j * Map::kRowStep * Layout::kStrideBytes) +
           xor_off[j % kKeyPeriod];
  }

  // Calls f(smem_offset, src, valid) for the items j with j % parts == part of the current k-tile.
#pragma nv_exec_check_disable
  template <typename F>
  KTUNE_GEMM_HD void for_items(int part, int parts, F&& f) const {
#pragma unroll
    for (int j = 0; j < Map::kIters; ++j) {
      if (j % parts != part) continue;
      if (!Map::kEven && row0 + j * Map::kRowStep >= ROWS) continue;
      const bool ok = (j * Map::kRowStep < rows_left) && (cols_left > 0);
      f(item_smem(j), ok ? ptr + j * item_stride : base, ok);
    }
  }
  // Issues this thread's share (part of parts) of the current k-tile into the tile at `dst`.
  template <int L2_PREFETCH>
  __device__ __forceinline__ void copy(unsigned dst, int part, int parts) const {
    for_items(part, parts, [dst](unsigned off, const T* src, bool ok) {
      cp_async16<L2_PREFETCH>(dst + off, src, ok);
    });
  }
  KTUNE_GEMM_HD void advance() {
    ptr += tile_stride;
    if (K_ROWS) rows_left -= BLOCK_K; else cols_left -= BLOCK_K;
  }
};

// ---- compile-time configuration and all index math -----------------------------------------
template <int A_ROW, int B_ROW, int BLOCK_M, int BLOCK_N, int BLOCK_K, int WARPS_M, int WARPS_N,
          int STAGES, int SWIZZLE>
struct GemmConfig {
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kWarpM = BLOCK_M / WARPS_M;  // warp tile rows
  static constexpr int kWarpN = BLOCK_N / WARPS_N;  // warp tile cols
  static constexpr int kMI = kWarpM / 16;           // m16 tiles per warp
  static constexpr int kNI = kWarpN / 8;            // n8 tiles per warp
  static constexpr int kKK = BLOCK_K / 16;          // k16 steps per k-tile
  static_assert(BLOCK_M % WARPS_M == 0 && BLOCK_N % WARPS_N == 0, "warps must divide the tile");
  static_assert(kWarpM % 16 == 0, "warp tile M must be a multiple of 16");
  static_assert(kWarpN % 16 == 0, "warp tile N must be a multiple of 16 (ldmatrix.x4 of B)");
  static_assert(BLOCK_K % 32 == 0, "BLOCK_K must be a multiple of 32 (even number of k16 steps)");
  static_assert(STAGES >= 2, "need at least two pipeline stages");


  // Operand tiles in shared memory: rows x cols, cols = the operand's contiguous dimension.
  static constexpr int kARows = A_ROW ? BLOCK_M : BLOCK_K;
  static constexpr int kACols = A_ROW ? BLOCK_K : BLOCK_M;
  static constexpr int kBRows = B_ROW ? BLOCK_K : BLOCK_N;
  static constexpr int kBCols = B_ROW ? BLOCK_N : BLOCK_K;
  using LayoutA = SmemLayout<kARows, kACols, SWIZZLE>;
  using LayoutB = SmemLayout<kBRows, kBCols, SWIZZLE>;
  static constexpr int kStageBytes = LayoutA::kBytes + LayoutB::kBytes;
  // Must equal the manifest's `smem`:
  //   STAGES * 2 * (BM*BK + BK*BN + (SWIZZLE ? 0 : 8 * ((A_ROW ? BM : BK) + (B_ROW ? BK : BN))))
  static constexpr int kSmemBytes = STAGES * kStageBytes;

  // ---- global -> shared copy mapping (per operand) ----
  // Thread `tid` copies chunk column tid % kChunks of rows tid / kChunks + j * row_step,
  // j = 0 .. iters-1. Consecutive threads read consecutive 16 bytes of a global row.
  template <int ROWS, int COLS>
  struct CopyMap {
    static constexpr int kChunks = COLS / 8;
    static_assert(kThreads % kChunks == 0, "threads must cover whole tile rows");
    static constexpr int kRowStep = kThreads / kChunks;
    static constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
    static constexpr bool kEven = ROWS % kRowStep == 0;  // every item of every thread exists
    static KTUNE_GEMM_HD int row(int tid, int j) { return tid / kChunks + j * kRowStep; }
    static KTUNE_GEMM_HD int chunk(int tid) { return tid % kChunks; }
  };
  using CopyA = CopyMap<kARows, kACols>;
  using CopyB = CopyMap<kBRows, kBCols>;
  template <typename T>
  using CopierA = TileCopier<T, CopyA, LayoutA, kARows, !A_ROW, BLOCK_K>;
  template <typename T>
  using CopierB = TileCopier<T, CopyB, LayoutB, kBRows, B_ROW != 0, BLOCK_K>;

  // ---- ldmatrix addressing ----
  // The byte offset (within a stage's operand tile) that lane `lane` passes to ldmatrix.x4 for
  // fragment (mi, kk) of A, or the n16 pair p (two n8 tiles) at kk of B, is
  //   a_base(lane, warp_m, A_ROW ? kk : mi) + a_const(mi, kk)
  //   b_base(lane, warp_n, B_ROW ? p : kk) + b_const(p, kk)
  // The split keeps the per-lane part in a few registers and folds the rest into immediates.
  //
  // A, A_ROW=1 (rows m, cols k), ldmatrix (no trans): lanes 0-15 -> rows 0-15 at k 0-7,
  //   lanes 16-31 -> rows 0-15 at k 8-15; matrices = a0..a3 of mma.m16n8k16.
  // A, A_ROW=0 (rows k, cols m), ldmatrix.trans: matrix q = lanes 8q..8q+7 addresses k rows
  //   (q / 2) * 8 + (lane % 8), m columns (q % 2) * 8..+7.
  static constexpr int kABases = A_ROW ? kKK : kMI;
  static KTUNE_GEMM_HD unsigned a_base(int lane, int warp_m, int idx) {
    if (A_ROW) {
      const int row = warp_m * kWarpM + (lane & 15);
      const int chunk = idx * 2 + (lane >> 4);
      return LayoutA::offset(row, chunk, LayoutA::key(lane & 7));
    } else {
      const int row = (lane & 7) + ((lane >> 4) << 3);
      const int chunk = (warp_m * kWarpM + idx * 16) / 8 + ((lane >> 3) & 1);
      return LayoutA::offset(row, chunk, LayoutA::key(lane & 7));
    }
  }
  static KTUNE_GEMM_HD unsigned a_const(int mi, int kk) {
    return static_cast<unsigned>((A_ROW ? mi : kk) * 16 * LayoutA::kStrideBytes);
  }
  // B, B_ROW=0 (rows n, cols k), ldmatrix (no trans): matrix q addresses n rows (q / 2) * 8 +
  //   (lane % 8), k chunk q % 2 -> {b0,b1} of n-tile 2p, then of n-tile 2p+1.
  // B, B_ROW=1 (rows k, cols n), ldmatrix.trans: matrix q addresses k rows (q % 2) * 8 +
  //   (lane % 8), n columns (q / 2) * 8..+7 -> same register order.
  static constexpr int kBBases = B_ROW ? kNI / 2 : kKK;
  static KTUNE_GEMM_HD unsigned b_base(int lane, int warp_n, int idx) {
    if (B_ROW) {
      const int row = (lane & 7) + (((lane >> 3) & 1) << 3);
      const int chunk = (warp_n * kWarpN + idx * 16) / 8 + (lane >> 4);
      return LayoutB::offset(row, chunk, LayoutB::key(lane & 7));
    } else {
      const int row = warp_n * kWarpN + (lane & 7) + ((lane >> 4) << 3);
      const int chunk = idx * 2 + ((lane >> 3) & 1);
      return LayoutB::offset(row, chunk, LayoutB::key(lane & 7));
    }
  }
  static KTUNE_GEMM_HD unsigned b_const(int p, int kk) {
    return static_cast<unsigned>((B_ROW ? kk : p) * 16 * LayoutB::kStrideBytes);
  }

  // ---- epilogue staging (per warp, 8 accumulator rows at a time) ----
  // Warp w stages rows r = 0..7 of its current (mi, h) slice at floats [w * kEpiWarpFloats +
  // r * kEpiStride, + kWarpN). Writer: lane l stores acc[mi][ni][2h..2h+1] as a float2 at row l/4,
  // column ni*8 + 2*(l%4) (the mma accumulator layout); the stride pads each row by 8 floats so the
  // 8 rows of a store hit distinct bank pairs (2 wavefronts, the minimum for 256 bytes).
  // Reader: item it*32 + l of the slice is row (it*32+l) / (kWarpN/4), columns 4*((it*32+l) %
  // (kWarpN/4)) .. +3: consecutive lanes read consecutive 16 bytes of a row and write consecutive
  // 4-element pieces of a row of C.
  static constexpr int kEpiStride = kWarpN + 8;
  static constexpr int kEpiWarpFloats = 8 * kEpiStride;
  static constexpr int kEpiBytes = kThreads / 32 * kEpiWarpFloats * 4;
  static constexpr int kEpiCols4 = kWarpN / 4;
  static constexpr int kEpiIters = 8 * kEpiCols4 / 32;  // kWarpN / 16
  static KTUNE_GEMM_HD int epi_write(int lane, int ni) {
    return (lane >> 2) * kEpiStride + ni * 8 + (lane & 3) * 2;
  }
  static KTUNE_GEMM_HD void epi_read(int lane, int it, int& row, int& col) {
    const int idx = it * 32 + lane;
    row = idx / kEpiCols4;
    col = (idx - row * kEpiCols4) * 4;
  }
  static_assert(kEpiBytes <= kSmemBytes, "epilogue staging must fit in the pipeline's shared memory");
};

// Threadblock rasterization: linear tile id -> (tile_m, tile_n). GROUP_M <= 1 is row-major order;
// otherwise tiles are walked column by column inside bands of GROUP_M tile rows, so consecutive
// blocks share A rows and B columns in L2 (Triton's grouped ordering).
KTUNE_GEMM_HD void raster(int pid, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
  if (group_m <= 1) {
    tm = pid / tiles_n;
    tn = pid - tm * tiles_n;
    return;
  }
  const int width = group_m * tiles_n;
  const int group = pid / width;
  const int first_m = group * group_m;
  const int rows = (tiles_m - first_m) < group_m ? (tiles_m - first_m) : group_m;
  const int r = pid - group * width;
  tm = first_m + r % rows;
  tn = r / rows;
}

// K-slice of split `z`: whole k-tiles [begin, begin + count).
KTUNE_GEMM_HD void k_slice(int k_tiles, int splits, int z, int& begin, int& count) {
  const int per = (k_tiles + splits - 1) / splits;
  begin = z * per;
  const int end = (begin + per) < k_tiles ? (begin + per) : k_tiles;
  count = end > begin ? end - begin : 0;
}



// Stores four adjacent outputs (row, col..col+3) of C = alpha*v + beta*C, masked at the right edge.
// vec_ok: N % 4 == 0, so a full group is aligned for one 8-byte (16-bit types) or 16-byte store.
template <typename TOut>
__device__ __forceinline__ void store4(TOut* __restrict__ C, int M, int N, int row, int col, float4 v,
                                       float alpha, float beta, bool vec_ok) {
  if (row >= M || col >= N) return;
  TOut* p = C + static_cast<long long>(row) * N + col;
  float x[4] = {v.x * alpha, v.y * alpha, v.z * alpha, v.w * alpha};
  if (vec_ok && col + 3 < N) {
    if constexpr (sizeof(TOut) == 4) {
      float4* q = reinterpret_cast<float4*>(p);
      if (beta != 0.0f) {
        const float4 o = *q;
        x[0] += beta * o.x;
        x[1] += beta * o.y;
        x[2] += beta * o.z;
        x[3] += beta * o.w;
      }
      *q = make_float4(x[0], x[1], x[2], x[3]);
    } else {
      uint2* q = reinterpret_cast<uint2*>(p);
      if (beta != 0.0f) {
        const uint2 o = *q;
        float o0, o1, o2, o3;
        ktune_dev::unpack2<TOut>(o.x, o0, o1);
        ktune_dev::unpack2<TOut>(o.y, o2, o3);
        x[0] += beta * o0;
        x[1] += beta * o1;
        x[2] += beta * o2;
        x[3] += beta * o3;
      }
      *q = make_uint2(ktune_dev::pack2<TOut>(x[0], x[1]), ktune_dev::pack2<TOut>(x[2], x[3]));
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (col + e < N) {
        float y = x[e];
        if (beta != 0.0f) y += beta * ktune_dev::to_float(p[e]);
        p[e] = ktune_dev::from_float<TOut>(y);
      }
    }
  }
}

// Epilogue walk: stages each (mi, h) slice of a warp's accumulators in shared memory (`stage`, the
// warp's kEpiWarpFloats floats) and calls f(row, col, 4 values) for every 4-column piece of the
// warp tile, rows wrow0.. and columns wcol0.. of C. (A function, not a generic lambda: NVRTC
// treats a generic lambda's call operator as host code.)
template <typename Cfg, int MI, int NI, typename F>
__device__ __forceinline__ void for_epilogue_pieces(const float (&acc)[MI][NI][4], float* stage, int lane,
                                                    int wrow0, int wcol0, F&& f) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
        *reinterpret_cast<float2*>(stage + Cfg::epi_write(lane, ni)) =
            make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
      __syncwarp();
#pragma unroll
      for (int it = 0; it < Cfg::kEpiIters; ++it) {
        int r, c;
        Cfg::epi_read(lane, it, r, c);
        const float4 v = *reinterpret_cast<const float4*>(stage + r * Cfg::kEpiStride + c);
        f(wrow0 + mi * 16 + h * 8 + r, wcol0 + c, v);
      }
      __syncwarp();
    }
  }
}

// Implementation choices that are not tuning parameters, measured on the H200 (bench/NOTES.md).
constexpr int kL2Prefetch = 128;         // cp.async L2 prefetch hint: 0, 128 or 256 bytes
constexpr bool kStagedEpilogue = true;   // C written through shared memory

// The kernel body. L2_PREFETCH: cp.async L2 prefetch hint (0, 128, 256). STAGED_EPILOGUE: write C
// through shared memory (row-contiguous 4-element stores) instead of straight from the
// accumulators (2-element stores). FRAG_MODE: 0 or 1 = the next k16 step's A and B fragments are
// loaded while this step computes (2 * (4*MI + 2*NI) registers); 2 = A double-buffered, B loaded
// half a warp tile ahead (2*4*MI + 2*NI registers; measured slower than 1 on 64x64 warp tiles).
// ktune_gemm fixes these (measurements in bench/NOTES.md); the bench harness
// (bench/kernel_check/gemm_check.cu) instantiates other choices to compare them.
template <typename TIn, typename TOut, int A_ROW, int B_ROW, int BLOCK_M, int BLOCK_N, int BLOCK_K,
          int WARPS_M, int WARPS_N, int STAGES, int GROUP_M, int SWIZZLE, int SPLIT_K,
          int L2_PREFETCH, bool STAGED_EPILOGUE, int FRAG_MODE>
__device__ __forceinline__ void gemm_body(const TIn* __restrict__ A, const TIn* __restrict__ B,
                                          TOut* __restrict__ C, float* __restrict__ workspace,
                                          int* __restrict__ tile_counters, int M, int N, int K,
                                          float alpha, float beta) {
  using Cfg = GemmConfig<A_ROW, B_ROW, BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, STAGES, SWIZZLE>;
  static_assert(sizeof(TIn) == 2, "inputs are 16-bit");
  constexpr int MI = Cfg::kMI, NI = Cfg::kNI, KK = Cfg::kKK;
  constexpr int HALVES = FRAG_MODE == 2 ? 2 : 1;
  static_assert(HALVES == 1 || NI % 4 == 0, "B halves need an even number of n16 pairs");
  constexpr int NB = NI / HALVES;  // n8 tiles per B fragment buffer
  constexpr int kABytes = Cfg::LayoutA::kBytes;
  constexpr int kStageBytes = Cfg::kStageBytes;
  constexpr int kCopyParts = (STAGES == 2 && KK >= 4) ? KK / 2 : KK;

  extern __shared__ __align__(128) unsigned char ktune_gemm_smem[];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / WARPS_N;
  const int warp_n = warp - warp_m * WARPS_N;

  // ---- which tile, which K slice ----
  const int tiles_m = ktune_dev::ceil_div(M, BLOCK_M);
  const int tiles_n = ktune_dev::ceil_div(N, BLOCK_N);
  int tile_m, tile_n;
  raster(static_cast<int>(blockIdx.x), tiles_m, tiles_n, GROUP_M, tile_m, tile_n);
  const int m0 = tile_m * BLOCK_M;
  const int n0 = tile_n * BLOCK_N;
  const int k_tiles = ktune_dev::ceil_div(K, BLOCK_K);
  int kt_begin = 0, kt_count = k_tiles;
  if (SPLIT_K > 1) k_slice(k_tiles, SPLIT_K, static_cast<int>(blockIdx.z), kt_begin, kt_count);
  const int k0 = kt_begin * BLOCK_K;

  // ---- copiers: global operand viewed as g_rows x g_cols (contiguous cols) ----
  typename Cfg::template CopierA<TIn> copy_a(A, A_ROW ? M : K, A_ROW ? K : M, A_ROW ? m0 : k0,
                                            A_ROW ? k0 : m0, tid);
  typename Cfg::template CopierB<TIn> copy_b(B, B_ROW ? K : N, B_ROW ? N : K, B_ROW ? k0 : n0,
                                            B_ROW ? n0 : k0, tid);

  // ---- per-lane ldmatrix offsets ----
  unsigned a_base[Cfg::kABases], b_base[Cfg::kBBases];
#pragma unroll
  for (int i = 0; i < Cfg::kABases; ++i) a_base[i] = Cfg::a_base(lane, warp_m, i);
#pragma unroll
  for (int i = 0; i < Cfg::kBBases; ++i) b_base[i] = Cfg::b_base(lane, warp_n, i) + kABytes;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  unsigned af[2][MI][4];
  unsigned bf[2][NB][2];

  // A fragments of k16 step kk from the stage at smem address `stage`.
  auto load_a = [&](unsigned stage, int kk, unsigned (&a)[MI][4]) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const unsigned addr = stage + a_base[A_ROW ? kk : mi] + Cfg::a_const(mi, kk);
      if (A_ROW) ldsm_x4(addr, a[mi]); else ldsm_x4_trans(addr, a[mi]);
    }
  };
  // B fragments of k16 step kk, n16 pairs p0 .. p0 + NB/2 - 1.
  auto load_b = [&](unsigned stage, int kk, int p0, unsigned (&b)[NB][2]) {
#pragma unroll
    for (int q = 0; q < NB / 2; ++q) {
      const int p = p0 + q;
      const unsigned addr = stage + b_base[B_ROW ? p : kk] + Cfg::b_const(p, kk);
      unsigned r[4];
      if (B_ROW) ldsm_x4_trans(addr, r); else ldsm_x4(addr, r);
      b[2 * q][0] = r[0];
      b[2 * q][1] = r[1];
      b[2 * q + 1][0] = r[2];
      b[2 * q + 1][1] = r[3];
    }
  };
  // MMAs of A fragments `a` with B fragments `b` (n8 tiles n_first .. n_first + NB - 1).
  // Serpentine n order reuses B registers between consecutive m rows.
  auto mma_all = [&](const unsigned (&a)[MI][4], const unsigned (&b)[NB][2], int n_first) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int nj = 0; nj < NB; ++nj) {
        const int ni = (mi & 1) ? NB - 1 - nj : nj;
        Mma<TIn>::run(acc[mi][n_first + ni], a[mi], b[ni][0], b[ni][1]);
      }
    }
  };

  const unsigned smem0 = smem_u32(ktune_gemm_smem);
  const unsigned smem_last = smem0 + (STAGES - 1) * kStageBytes;

  // ---- prologue: k-tiles 0 .. STAGES-2 in flight ----
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < kt_count) {
      copy_a.template copy<L2_PREFETCH>(smem0 + s * kStageBytes, 0, 1);
      copy_b.template copy<L2_PREFETCH>(smem0 + s * kStageBytes + kABytes, 0, 1);
      copy_a.advance();
      copy_b.advance();
    }
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();

  unsigned rd = smem0;       // stage holding k-tile kt
  unsigned wr = smem_last;   // stage receiving k-tile kt + STAGES - 1
  load_a(rd, 0, af[0]);
  load_b(rd, 0, 0, bf[0]);

  // ---- main loop ----
  for (int kt = 0; kt < kt_count; ++kt) {
    const bool fetch = kt + STAGES - 1 < kt_count;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      // Spread this k-tile's copies over the k16 steps (with two stages, over the first half only:
      // the barrier at the end of this k-tile waits for them).
      if (fetch && kk < kCopyParts) {
        copy_a.template copy<L2_PREFETCH>(wr, kk, kCopyParts);
        copy_b.template copy<L2_PREFETCH>(wr + kABytes, kk, kCopyParts);
      }
      if constexpr (HALVES == 2) {
        // Second half of this step's B while the first half computes.
        load_b(rd, kk, NI / 4, bf[1]);
        mma_all(af[kk & 1], bf[0], 0);
      }
      if (kk == KK - 1) {
        if (fetch) {
          copy_a.advance();
          copy_b.advance();
        }
        cp_async_commit();
        // k-tile kt+1 has landed once at most STAGES-2 younger groups are pending; the barrier
        // also retires every warp's reads of the stage the next iteration overwrites.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        rd = (rd == smem_last) ? smem0 : rd + kStageBytes;
        wr = (wr == smem_last) ? smem0 : wr + kStageBytes;
      }
      // Fragments for the next k16 step (of the next k-tile after the last step) ...
      if constexpr (HALVES == 2) {
        load_a(rd, (kk + 1) % KK, af[(kk + 1) & 1]);
        load_b(rd, (kk + 1) % KK, 0, bf[0]);
        // ... while the tensor cores work on this step's second half.
        mma_all(af[kk & 1], bf[1], NI / 2);
      } else {
        load_a(rd, (kk + 1) % KK, af[(kk + 1) & 1]);
        load_b(rd, (kk + 1) % KK, 0, bf[(kk + 1) & 1]);
        // ... while the tensor cores work on this one.
        mma_all(af[kk & 1], bf[kk & 1], 0);
      }
    }
  }
  cp_async_wait<0>();

  const bool vec4_ok = (N & 3) == 0;

  if constexpr (STAGED_EPILOGUE) {
    // ---- epilogue through shared memory ----
    __syncthreads();  // every warp is done reading the pipeline stages
    float* stage = reinterpret_cast<float*>(ktune_gemm_smem) + warp * Cfg::kEpiWarpFloats;
    const int wrow0 = m0 + warp_m * Cfg::kWarpM;
    const int wcol0 = n0 + warp_n * Cfg::kWarpN;
    if constexpr (SPLIT_K > 1) {
      const long long mn = static_cast<long long>(M) * N;
      float* part = workspace + static_cast<long long>(blockIdx.z) * mn;
      for_epilogue_pieces<Cfg>(acc, stage, lane, wrow0, wcol0, [&](int row, int col, float4 v) {
        if (row >= M || col >= N) return;
        float* p = part + static_cast<long long>(row) * N + col;
        if (vec4_ok && col + 3 < N) {
          *reinterpret_cast<float4*>(p) = v;
        } else {
          const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (col + e < N) p[e] = x[e];
        }
      });
      __threadfence();  // partial visible device-wide before this block takes its ticket
      __syncthreads();
      int ticket = 0;
      if (tid == 0) ticket = atomicAdd(&tile_counters[blockIdx.x], 1);
      const int last = __syncthreads_or(tid == 0 && ticket == SPLIT_K - 1);
      if (!last) return;
      __threadfence();
      for_epilogue_pieces<Cfg>(acc, stage, lane, wrow0, wcol0, [&](int row, int col, float4 v) {
        if (row >= M || col >= N) return;
        const long long off = static_cast<long long>(row) * N + col;
        const bool vec = vec4_ok && col + 3 < N;
#pragma unroll 1
        for (int z = 0; z < SPLIT_K; ++z) {
          if (z == static_cast<int>(blockIdx.z)) continue;
          const float* p = workspace + static_cast<long long>(z) * mn + off;
          if (vec) {
            const float4 o = ld_cg4(p);
            v.x += o.x;
            v.y += o.y;
            v.z += o.z;
            v.w += o.w;
          } else {
            v.x += ld_cg(p);
            if (col + 1 < N) v.y += ld_cg(p + 1);
            if (col + 2 < N) v.z += ld_cg(p + 2);
            if (col + 3 < N) v.w += ld_cg(p + 3);
          }
        }
        store4<TOut>(C, M, N, row, col, v, alpha, beta, vec4_ok);
      });
      if (tid == 0) tile_counters[blockIdx.x] = 0;  // self-cleaning: ready for the next launch
    } else {
      for_epilogue_pieces<Cfg>(acc, stage, lane, wrow0, wcol0, [&](int row, int col, float4 v) { store4<TOut>(C, M, N, row, col, v, alpha, beta, vec4_ok); });
    }
  } else {
    // ---- epilogue straight from the accumulators (2-element stores) ----
    const int row_base = m0 + warp_m * Cfg::kWarpM + (lane >> 2);
    const int col_base = n0 + warp_n * Cfg::kWarpN + (lane & 3) * 2;
    const bool vec_ok = (N & 1) == 0;
    if constexpr (SPLIT_K > 1) {
      const long long mn = static_cast<long long>(M) * N;
      float* part = workspace + static_cast<long long>(blockIdx.z) * mn;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row_base + mi * 16 + h * 8;
            const int col = col_base + ni * 8;
            if (row < M && col < N) {
              float* p = part + static_cast<long long>(row) * N + col;
              if (vec_ok && col + 1 < N) {
                *reinterpret_cast<float2*>(p) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
              } else {
                p[0] = acc[mi][ni][2 * h];
                if (col + 1 < N) p[1] = acc[mi][ni][2 * h + 1];
              }
            }
          }
      __threadfence();
      __syncthreads();
      int ticket = 0;
      if (tid == 0) ticket = atomicAdd(&tile_counters[blockIdx.x], 1);
      const int last = __syncthreads_or(tid == 0 && ticket == SPLIT_K - 1);
      if (!last) return;
      __threadfence();
#pragma unroll 1
      for (int z = 0; z < SPLIT_K; ++z) {
        if (z == static_cast<int>(blockIdx.z)) continue;
        const float* other = workspace + static_cast<long long>(z) * mn;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = row_base + mi * 16 + h * 8;
              const int col = col_base + ni * 8;
              if (row < M && col < N) {
                const float* p = other + static_cast<long long>(row) * N + col;
                if (vec_ok && col + 1 < N) {
                  float x, y;
                  ld_cg2(p, x, y);
                  acc[mi][ni][2 * h] += x;
                  acc[mi][ni][2 * h + 1] += y;
                } else {
                  acc[mi][ni][2 * h] += ld_cg(p);
                  if (col + 1 < N) acc[mi][ni][2 * h + 1] += ld_cg(p + 1);
                }
              }
            }
      }
      if (tid == 0) tile_counters[blockIdx.x] = 0;
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_pair<TOut>(C, M, N, row_base + mi * 16 + h * 8, col_base + ni * 8,
                           acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], alpha, beta, vec_ok);
  }
}

}  // namespace ktune_gemm_detail

// REQUIRES (checked by the manifest's constraints, not here): the contiguous dimension of A and
// of B is a multiple of 8 elements and both are 16-byte aligned; C is 16-byte aligned.
// grid = (ceil(M/BLOCK_M) * ceil(N/BLOCK_N), 1, SPLIT_K), block = WARPS_M*WARPS_N*32 threads,
// dynamic smem = GemmConfig::kSmemBytes. With SPLIT_K > 1, `workspace` holds SPLIT_K*M*N floats
// and `tile_counters` one zeroed int per tile (left zeroed); with SPLIT_K == 1 neither is touched.
// The explicit minimum of 1 block per SM in __launch_bounds__ lets ptxas use up to 255 registers
// for small blocks (without it, 64-thread configs were capped near 168 and spilled).
template <typename TIn, typename TOut, int A_ROW, int B_ROW, int BLOCK_M, int BLOCK_N, int BLOCK_K,
          int WARPS_M, int WARPS_N, int STAGES, int GROUP_M, int SWIZZLE, int SPLIT_K>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32, 1)
    ktune_gemm(const TIn* __restrict__ A, const TIn* __restrict__ B, TOut* __restrict__ C,
               float* __restrict__ workspace, int* __restrict__ tile_counters, int M, int N, int K,
               float alpha, float beta) {
  ktune_gemm_detail::gemm_body<TIn, TOut, A_ROW, B_ROW, BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N,
                               STAGES, GROUP_M, SWIZZLE, SPLIT_K, ktune_gemm_detail::kL2Prefetch,
                               ktune_gemm_detail::kStagedEpilogue, 0>(A, B, C, workspace, tile_counters, M,
                                                              N, K, alpha, beta);
}

#endif  // KTUNE_GEMM_CUH_
