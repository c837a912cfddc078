// gemm_tma.cuh — ktune's TMA Hopper GEMM (sm_90a): C = alpha * A B^T + beta * C, fp32 accumulation.
// The template form of the bench prototype bench/kernel_check/gemm_tma.cuh (issue 13; measured
// 0.97-1.02x cuBLAS on large bf16 shapes on the H200, bench/NOTES.md "GEMM (TMA prototype)").
//
//   A: M x K row-major, B: N x K row-major (= K x N column-major, nn.Linear's weight): layout rc,
//   both operands K-major, as wgmma reads them. C: M x N row-major, never read when beta == 0.
//   bf16/fp16 in, bf16/fp16/fp32 out. A and B reach the kernel only through their tensor maps
//   (tmA: dims {K, M}, box {64, BLOCK_M / CLUSTER_N}; tmB: dims {K, N}, box {64, BLOCK_N /
//   CLUSTER_M}; both 128-byte swizzle, zero fill), which the worker encodes (docs/templates.md,
//   "Tensor maps"): K % 8 == 0 for 16-byte row strides.
//
// Knobs (the manifest's params): BLOCK_M x BLOCK_N x BLOCK_K tile, STAGES, CONSUMERS (1 to 3
// warpgroups; each owns BLOCK_M / CONSUMERS rows; three leave ptxas 128 registers a thread),
// GROUP_M and RASTER (the order of tiles: bands of GROUP_M tile rows walked column by column inside
// a band, or with RASTER 1 bands of GROUP_M tile columns walked row by row), EPILOGUE (0: from
// registers, 4-byte stores; 1: through a dedicated shared area, 8 rows per warp at a time, 16-byte
// stores; 2: stmatrix into two 128-byte-swizzled boxes per warp and TMA stores through tmC, left
// in flight while the next tile's main loop runs), CLUSTER_M / CLUSTER_N (2-CTA clusters:
// vertically adjacent tiles that multicast the B tile they share, or horizontally adjacent ones
// that multicast their A tile), SPLITS (split-K: each tile's K range in SPLITS work units), REDUCE
// (how a split tile's partials are summed: 0 through a global workspace by the CTA that finishes
// last, 1 in a cluster of the tile's SPLITS CTAs through distributed shared memory, 2 in column
// bands by each of the tile's SPLITS CTAs through the workspace, on a grid that is resident at
// once; below), SCHEDULE (how the consumer warpgroups share the work, below). Persistence is a
// launch choice: the kernel walks work units blockIdx.x, + gridDim.x, ... (in clusters); a grid of
// one block per unit is the plain kernel, a grid of max_active_clusters clusters the persistent
// one. The stage ring and its phases carry over from one unit to the next, so the producer fills
// the next tile's stages while the consumers run the epilogue of the current one.
//
// Consumer schedules (SCHEDULE):
//   0 cooperative: both consumer warpgroups work on every tile, each on BLOCK_M / CONSUMERS rows
//     of it; the tensor cores idle while the consumers run a tile's epilogue.
//   1 ping-pong (two consumers, persistent grid, no split-K): each warpgroup owns whole
//     BLOCK_M x BLOCK_N tiles (so BLOCK_M 64 is possible), warpgroup w taking the block's work
//     units 2 i + w. Two named barriers order the mainloops: a warpgroup issues its tile's wgmmas
//     only after the other one has issued all of its previous tile's, so the mainloops alternate
//     and one warpgroup's epilogue runs under the other's MMAs (short-K shapes: 8192x8192x512, 8
//     k-tiles per tile, went 0.90 -> 1.09x cuBLAS on the H200, bench/NOTES.md "gemm_tma step 2";
//     long-K shapes gain nothing: the epilogue is 1-2 % there). The producer is the same:
//     it fills the ring in work-unit order, and each warpgroup steps its ring position over the
//     other's k-tiles. The ordering is also what keeps the parity waits exact: a warpgroup waits
//     on a stage only after every earlier fill of the ring has completed.
//
// Shared memory (dynamic, base rounded up to 1024 B): [stage 0 | ... | stage S-1 | epilogue area |
// full[S] | empty[S] | split-K flag]. A stage is A (BLOCK_M rows) then B (BLOCK_N rows), each as
// BLOCK_K / 64 column blocks of rows x 128 B in the 128-byte-swizzle layout that TMA writes and
// that the wgmma descriptors read (stride byte offset 1024 = one 8-row atom). Every column block
// starts on a 1024-byte boundary. The manifest's `smem` must equal TmaConfig::kSmemBytes.
//
// Synchronisation: full[s] (count 1): the producer thread arrives with expect_tx(stage bytes),
// the TMA loads complete the transaction. empty[s] (count 4 * readers * cluster size, readers =
// CONSUMERS cooperative, 1 ping-pong): each consumer warp that read the stage (in each CTA of the
// cluster) arrives once the wgmmas that read stage s have retired
// (wgmma.wait_group 1 after the next stage's wgmmas are issued; the last stage of a unit after
// wait_group 0). Use u of a stage (u = 0, 1, ...) waits on full with parity u & 1 and, for u > 0,
// the producer waits on empty with parity (u - 1) & 1.
#ifndef KTUNE_GEMM_TMA_CUH_
#define KTUNE_GEMM_TMA_CUH_

#include "ktune_common.cuh"
#include "ktune_gemm_store.cuh"
#include "ktune_tma.cuh"
#include "gemm_sm90.cuh"  // wgmma and mbarrier wrappers, raster, named barrier

namespace ktune_gemm_tma_detail {

using ktune_gemm_sm90_detail::fence_regs;
using ktune_gemm_sm90_detail::mbar_arrive;
using ktune_gemm_sm90_detail::mbar_init;
using ktune_gemm_sm90_detail::mbar_wait;
using ktune_gemm_sm90_detail::setmaxnreg_dec;
using ktune_gemm_sm90_detail::setmaxnreg_inc;
using ktune_gemm_sm90_detail::smem_desc_sw128;
using ktune_gemm_sm90_detail::smem_u32;
using ktune_gemm_sm90_detail::Wgmma;
using ktune_gemm_sm90_detail::wgmma_commit;
using ktune_gemm_sm90_detail::wgmma_fence;
using ktune_gemm_sm90_detail::wgmma_wait;
using ktune_tma::cluster_ctarank;
using ktune_tma::cluster_map;
using ktune_tma::cluster_nctarank;
using ktune_tma::bulk_wait_group_read;
using ktune_tma::cluster_sync;
using ktune_tma::fence_barrier_init;
using ktune_tma::ld_cluster_f4;
using ktune_tma::mbar_arrive_expect_tx;
using ktune_tma::mbar_arrive_remote;
using ktune_tma::prefetch_tensormap;
using ktune_tma::st_shared_f4;
using ktune_tma::tma_load_2d;
using ktune_tma::tma_load_2d_multicast;

// ---- compile-time configuration -----------------------------------------------------------------
constexpr int kCooperative = 0;  // SCHEDULE values
constexpr int kPingpong = 1;
constexpr int kRasterRows = 0;   // RASTER values: bands of tile rows, or of tile columns
constexpr int kRasterColumns = 1;
// Epilogue 2's TMA-store box: 16 rows x 128 bytes of outputs, in the 128-byte swizzle.
constexpr int kEpiBoxRows = 16;
constexpr int kEpiBoxBytes = kEpiBoxRows * 128;

// The CTAs of a cluster: CM x CN tiles (at most two CTAs: 2 x 1 share B, 1 x 2 share A).
template <int CM, int CN>
struct ClusterShape {
  static constexpr int kM = CM, kN = CN, kSize = CM * CN;
  static_assert((CM == 1 || CM == 2) && (CN == 1 || CN == 2) && kSize <= 2, "clusters of 1 or 2 CTAs");
};

template <typename TIn, typename TOut, int BLOCK_M, int BLOCK_N, int BLOCK_K, int STAGES, int CONSUMERS, int EPILOGUE,
          int SCHEDULE>
struct TmaConfig {
  using In = TIn;
  using Out = TOut;
  static constexpr int kBlockM = BLOCK_M, kBlockN = BLOCK_N, kStages = STAGES, kEpilogue = EPILOGUE;
  static constexpr int kThreads = (CONSUMERS + 1) * 128;
  // Rows of a tile per consumer warpgroup: a share of the tile, or the whole tile (ping-pong).
  static constexpr int kWgM = SCHEDULE == kPingpong ? BLOCK_M : BLOCK_M / CONSUMERS;
  // Consumer warpgroups that read each stage (and release it on empty[s]).
  static constexpr int kReaders = SCHEDULE == kPingpong ? 1 : CONSUMERS;
  static constexpr int kMS = kWgM / 64;             // m64 slices per consumer warpgroup
  static constexpr int kAcc = BLOCK_N / 2;          // fp32 accumulators per slice per thread
  static constexpr int kKK = BLOCK_K / 16;          // k16 steps per stage
  static constexpr int kCB = BLOCK_K / 64;          // 64-element column blocks (one TMA box each)
  static constexpr int kABytes = BLOCK_M * BLOCK_K * int(sizeof(TIn));
  static constexpr int kBBytes = BLOCK_N * BLOCK_K * int(sizeof(TIn));
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Epilogue 1: per consumer warp 8 rows of BLOCK_N outputs; the 16-byte row pad puts the 8 rows x
  // 4 lanes of a fragment store in 32 distinct banks (2-byte outputs).
  static constexpr int kEpiPitch = BLOCK_N * int(sizeof(TOut)) + 16;
  // Epilogue 2: per consumer warp two boxes (a TMA store's source), used in turn so that one is
  // filled while the other is being stored.
  static constexpr int kEpiWarpBytes = EPILOGUE == 2 ? 2 * kEpiBoxBytes : 8 * kEpiPitch;
  static constexpr int kEpiBytes = EPILOGUE ? CONSUMERS * 4 * kEpiWarpBytes : 0;
  static constexpr int kBarOffset = STAGES * kStageBytes + kEpiBytes;  // from the aligned base
  static constexpr int kFlagOffset = kBarOffset + 16 * STAGES;        // split-K "last CTA" flag
  static constexpr int kSmemBytes = 1024 + kFlagOffset + 16;           // + worst-case base rounding

  static_assert(sizeof(TIn) == 2, "bf16 or fp16 inputs: a 64-element box row is one 128-byte swizzle span");
  static_assert(BLOCK_K % 64 == 0 && BLOCK_K <= 128, "BLOCK_K: one or two 128-byte column blocks");
  static_assert(BLOCK_N == 128 || BLOCK_N == 160 || BLOCK_N == 192 || BLOCK_N == 256,
                "wgmma n128, n160, n192 or n256");
  static_assert(kWgM % 64 == 0 && kWgM * kReaders == BLOCK_M && BLOCK_M <= 256,
                "whole m64 slices per warpgroup; TMA box <= 256");
  static_assert(SCHEDULE == kCooperative || (SCHEDULE == kPingpong && CONSUMERS == 2),
                "ping-pong alternates two consumer warpgroups");
  static_assert(kMS * kAcc <= 128, "at most 128 fp32 accumulators per thread");
  static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "one to three consumer warpgroups");
  static_assert(STAGES >= 2 && STAGES <= 8, "2..8 stages");
  static_assert(kSmemBytes <= 232448, "fits the 227 KB opt-in shared memory of sm_90");
  static_assert(EPILOGUE >= 0 && EPILOGUE <= 2, "epilogue 0 (direct), 1 (staged) or 2 (TMA store)");
  static_assert(EPILOGUE != 2 || (STAGES * kStageBytes) % 1024 == 0, "epilogue boxes on 1024-byte swizzle atoms");
};

// Registers per thread after setmaxnreg with two consumer warpgroups: 128 * 40 + 256 * 232 = 64512.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;

// desc moved by off16 (bytes / 16) on its low word only: the start-address field (bits 0-13)
// of a shared-memory address under 256 KB never carries into the high word, and a 32-bit add
// spares a 64-bit carry chain per wgmma (ncu, bench/NOTES.md "stream-K": the descriptor
// arithmetic was most of the kernel's issued instructions).
__device__ __forceinline__ unsigned long long desc_plus(unsigned long long desc, unsigned off16) {
  return (desc & 0xFFFFFFFF00000000ull) | (static_cast<unsigned>(desc) + off16);
}

// One consumer warpgroup's wgmmas over one stage (k16 steps outer, m64 slices inner). row0 is
// warp-uniform (the caller's warpgroup index comes from a shuffle), so the compiler can keep the
// descriptors in uniform registers.
template <typename TIn, int BLOCK_M, int BLOCK_N, int KK, int MS, int ACC>
__device__ __forceinline__ void mma_stage(float (&acc)[MS][ACC], unsigned a_tile, unsigned b_tile, int row0) {
  const unsigned long long da0 = smem_desc_sw128(a_tile + row0 * 128);
  const unsigned long long db0 = smem_desc_sw128(b_tile);
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
#pragma unroll
    for (int ms = 0; ms < MS; ++ms) {
      const unsigned a_off = (kk >> 2) * BLOCK_M * 128 + ms * 64 * 128 + (kk & 3) * 32;
      const unsigned b_off = (kk >> 2) * BLOCK_N * 128 + (kk & 3) * 32;
      Wgmma<TIn, BLOCK_N>::run(acc[ms], desc_plus(da0, a_off >> 4), desc_plus(db0, b_off >> 4));
    }
  }
}

// Epilogue 0: straight from the m64nNk16 fragments (d[4i + j]: row 16 warp + lane / 4 + 8 (j / 2),
// column 8 i + 2 (lane % 4) + j % 2).
template <typename TOut, int MS, int ACC>
__device__ __forceinline__ void epilogue_direct(const float (&acc)[MS][ACC], TOut* __restrict__ C, int M, int N,
                                                int row0, int col0, float alpha, float beta) {
  const int t = static_cast<int>(threadIdx.x) & 127;
  const int warp = t >> 5, lane = t & 31;
  const bool vec_ok = (N & 1) == 0;
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) {
    const int r = row0 + ms * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int i = 0; i < ACC / 4; ++i) {
      const int c = col0 + i * 8 + (lane & 3) * 2;
      ktune_gemm_store::store_pair<TOut>(C, M, N, r, c, acc[ms][4 * i], acc[ms][4 * i + 1], alpha, beta, vec_ok);
      ktune_gemm_store::store_pair<TOut>(C, M, N, r + 8, c, acc[ms][4 * i + 2], acc[ms][4 * i + 3], alpha, beta,
                                         vec_ok);
    }
  }
}

// Epilogue 1: each warp converts 8 rows of its fragment at a time into its private padded area,
// then writes whole rows with 16-byte stores (consecutive lanes on consecutive chunks).
template <typename TOut, int BLOCK_N, int PITCH, int MS, int ACC>
__device__ __forceinline__ void epilogue_staged(const float (&acc)[MS][ACC], unsigned char* area,
                                                TOut* __restrict__ C, int M, int N, int row0, int col0,
                                                float alpha, float beta) {
  constexpr int kVec = 16 / int(sizeof(TOut));  // outputs per 16-byte chunk
  constexpr int kChunks = BLOCK_N / kVec;       // chunks per row
  static_assert((8 * kChunks) % 32 == 0, "whole warp passes");
  const int t = static_cast<int>(threadIdx.x) & 127;
  const int warp = t >> 5, lane = t & 31;
  const bool vec_ok = (N % kVec) == 0;
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < ACC / 4; ++i) {
        unsigned char* p = area + (lane >> 2) * PITCH + (i * 8 + (lane & 3) * 2) * int(sizeof(TOut));
        const float v0 = alpha * acc[ms][4 * i + 2 * h], v1 = alpha * acc[ms][4 * i + 2 * h + 1];
        if constexpr (sizeof(TOut) == 4) {
          *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<unsigned*>(p) = ktune_dev::pack2<TOut>(v0, v1);
        }
      }
      __syncwarp();
      const int rbase = row0 + ms * 64 + warp * 16 + 8 * h;
#pragma unroll
      for (int it = 0; it < 8 * kChunks / 32; ++it) {
        const int item = it * 32 + lane;
        const int r = item / kChunks, ch = item % kChunks;
        const int row = rbase + r, col = col0 + ch * kVec;
        if (row >= M || col >= N) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(area + r * PITCH + ch * 16);
        TOut* g = C + static_cast<long long>(row) * N + col;
        if (vec_ok && col + kVec <= N && beta == 0.0f) {
          *reinterpret_cast<uint4*>(g) = v;
        } else {
          const TOut* sv = reinterpret_cast<const TOut*>(area + r * PITCH + ch * 16);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            if (col + e < N) {
              float y = ktune_dev::to_float(sv[e]);
              if (beta != 0.0f) y += beta * ktune_dev::to_float(g[e]);
              g[e] = ktune_dev::from_float<TOut>(y);
            }
          }
        }
      }
      __syncwarp();
    }
  }
}

// stmatrix .x4: lanes 8j..8j+7 give the row addresses of 8x8 matrix j; r[j] is this thread's
// pair of it in the mma fragment layout (row lane / 4, columns 2 (lane % 4) + {0, 1}).
__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Epilogue 2: each warp writes its 16 rows of each m64 slice as boxes of 16 rows x 128 bytes:
// fragments -> shared (stmatrix for 2-byte outputs, 8-byte stores for fp32) in the 128-byte
// swizzle (16-byte chunk c of row r at chunk c ^ (r % 8): conflict-free, and what TMA expects),
// then one lane issues the box's TMA store. The warp's two boxes alternate; before refilling one
// its previous store must have read it (wait_group.read 1). Nothing waits for the stores at the
// end of a tile: they drain under the next tile's main loop (the kernel waits once at exit). TMA
// clips rows >= M and columns >= N; beta != 0 reads C first (plain loads, masked).
template <typename TOut, int BLOCK_N, int MS, int ACC>
__device__ __forceinline__ void epilogue_tma(const float (&acc)[MS][ACC], unsigned area, const ktune_tensor_map* tmC,
                                             const TOut* __restrict__ C, int M, int N, int row0, int col0,
                                             float alpha, float beta) {
  constexpr int kBoxCols = 128 / int(sizeof(TOut));  // outputs per box row
  constexpr int kGroups = kBoxCols / 8;  // 8-column fragment groups per box
  static_assert(BLOCK_N % kBoxCols == 0,
                "whole 128-byte boxes per tile row (2-byte outputs: BLOCK_N % 64 == 0)");
  const int t = static_cast<int>(threadIdx.x) & 127;
  const int warp = t >> 5, lane = t & 31;
  // An odd count of boxes per tile (128x192 tiles of 2-byte outputs: three; 128x160 of fp32: five)
  // ends on box 0, which the next tile fills first: its first box then waits for every store
  // (issued a main loop ago).
  constexpr bool kOddBoxes = (MS * (BLOCK_N / kBoxCols)) % 2 == 1;
  int k = 0;  // boxes this warp has issued in this tile (the parity restarts with each tile)
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) {
    const int wrow = row0 + ms * 64 + warp * 16;
#pragma unroll
    for (int cb = 0; cb < BLOCK_N / kBoxCols; ++cb, ++k) {
      const unsigned box = area + (k & 1) * kEpiBoxBytes;
      if (lane == 0) {
        if (kOddBoxes && k == 0)
          ktune_tma::bulk_wait_group_read<0>();
        else
          ktune_tma::bulk_wait_group_read<1>();
      }
      __syncwarp();
      float v[kGroups * 4];
#pragma unroll
      for (int g = 0; g < kGroups; ++g)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[4 * g + e] = alpha * acc[ms][4 * (cb * kGroups + g) + e];
      if (beta != 0.0f) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = wrow + (lane >> 2) + 8 * (e >> 1);
            const int c = col0 + cb * kBoxCols + g * 8 + (lane & 3) * 2 + (e & 1);
            if (r < M && c < N) v[4 * g + e] += beta * ktune_dev::to_float(C[static_cast<long long>(r) * N + c]);
          }
      }
      if constexpr (sizeof(TOut) == 2) {
        // Matrices j = 0..3 of groups (g, g + 1): rows 0-7 / 8-15 of group g, then of group g + 1.
        const int r = (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
        for (int g = 0; g < kGroups; g += 2) {
          const int chunk = g + (lane >> 4);
          stmatrix_x4(box + r * 128 + ((chunk ^ (r & 7)) << 4), ktune_dev::pack2<TOut>(v[4 * g], v[4 * g + 1]),
                      ktune_dev::pack2<TOut>(v[4 * g + 2], v[4 * g + 3]),
                      ktune_dev::pack2<TOut>(v[4 * g + 4], v[4 * g + 5]),
                      ktune_dev::pack2<TOut>(v[4 * g + 6], v[4 * g + 7]));
        }
      } else {
        // fp32: group g's pair (lane % 4) is 8 bytes at byte 32 g + 8 (lane % 4) of the row.
#pragma unroll
        for (int g = 0; g < kGroups; ++g)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = (lane >> 2) + 8 * h;
            const int chunk = 2 * g + ((lane & 3) >> 1);
            const unsigned a = box + r * 128 + ((chunk ^ (r & 7)) << 4) + 8 * (lane & 1);
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(v[4 * g + 2 * h]),
                         "f"(v[4 * g + 2 * h + 1])
                         : "memory");
          }
      }
      ktune_tma::fence_proxy_async_smem();
      __syncwarp();
      if (lane == 0) {
        ktune_tma::tma_store_2d(tmC, box, col0 + cb * kBoxCols, wrow);
        ktune_tma::bulk_commit_group();
      }
    }
  }
}

// Hand-off of one tile's fp32 partials among the `n` CTAs that each computed a part of its K range
// (split-K: the tile's k-slices; stream-K: the pieces of the block shares that cover it), called by
// all consumer threads of each. A contributor stores its partial to its own workspace slot `mine`
// in fragment order (element i of consumer thread t at [i / 4][t][i % 4]: coalesced 16-byte
// stores) and counts itself on *counter; the last to arrive sums every contributor's partial in
// contributor (= K) order, `slot(0)` .. `slot(n - 1)` (its own read back too), resets the counter
// and returns true (it writes C). `head`: this is contributor 0 (stream-K: the share that ends on
// the tile's first k-tiles, so it usually comes last); when it finds the n - 1 others already
// counted it neither stores nor reads back its own partial, and sums the same terms in the same
// order from its registers, so the result is bitwise the same whichever CTA finishes.
// Counters are zero at entry and exit.
template <typename Cfg, int MS, int ACC, typename SlotOf>
__device__ __forceinline__ bool reduce_partials(float (&acc)[MS][ACC], float* __restrict__ mine, SlotOf slot, int n,
                                                bool head, int* __restrict__ counter, unsigned char* flag_smem) {
  constexpr int kT = Cfg::kThreads - 128;  // consumer threads
  const int t = static_cast<int>(threadIdx.x) - 128;
  volatile int* flag = reinterpret_cast<volatile int*>(flag_smem);
  bool have_first = false;  // acc already holds contributor 0's partial
  if (head) {
    if (t == 0) *flag = atomicAdd(counter, 0) == n - 1;
    ktune_gemm_sm90_detail::named_barrier(kT);
    have_first = *flag != 0;
    ktune_gemm_sm90_detail::named_barrier(kT);  // the flag slot is reused below
  }
  if (!have_first) {
    float4* mine4 = reinterpret_cast<float4*>(mine);
#pragma unroll
    for (int ms = 0; ms < MS; ++ms)
#pragma unroll
      for (int i = 0; i < ACC / 4; ++i)
        mine4[(ms * ACC / 4 + i) * kT + t] =
            make_float4(acc[ms][4 * i], acc[ms][4 * i + 1], acc[ms][4 * i + 2], acc[ms][4 * i + 3]);
    __threadfence();
    ktune_gemm_sm90_detail::named_barrier(kT);
    if (t == 0) *flag = atomicAdd(counter, 1) == n - 1;
    ktune_gemm_sm90_detail::named_barrier(kT);
    const bool last = *flag != 0;
    ktune_gemm_sm90_detail::named_barrier(kT);  // the flag slot is reused by the next tile
    if (!last) return false;
  }
  __threadfence();
  // kCh float4 loads in flight per thread and batch (run 4 of the prototype issued one load at a
  // time and the reduction was latency-bound: 4096^3 with 4 splits ran at 0.18x cuBLAS); 10 for
  // the 20 n8 groups of a 160-wide tile.
  constexpr int kCh = (ACC / 4) % 8 == 0 ? 8 : 10;
  static_assert((ACC / 4) % kCh == 0, "whole batches");
  const int c0 = have_first ? 1 : 0;
#pragma unroll
  for (int ms = 0; ms < MS; ++ms)
#pragma unroll
    for (int i0 = 0; i0 < ACC / 4; i0 += kCh) {
#pragma unroll 1
      for (int c = c0; c < n; ++c) {
        const float4* part = reinterpret_cast<const float4*>(slot(c));
        float4 v[kCh];
#pragma unroll
        for (int j = 0; j < kCh; ++j) v[j] = __ldcg(part + (ms * ACC / 4 + i0 + j) * kT + t);
        if (c == 0) {  // the first term is taken as is (no 0 + x: the sign of a zero survives)
#pragma unroll
          for (int j = 0; j < kCh; ++j) {
            acc[ms][4 * (i0 + j)] = v[j].x;
            acc[ms][4 * (i0 + j) + 1] = v[j].y;
            acc[ms][4 * (i0 + j) + 2] = v[j].z;
            acc[ms][4 * (i0 + j) + 3] = v[j].w;
          }
        } else {
#pragma unroll
          for (int j = 0; j < kCh; ++j) {
            acc[ms][4 * (i0 + j)] += v[j].x;
            acc[ms][4 * (i0 + j) + 1] += v[j].y;
            acc[ms][4 * (i0 + j) + 2] += v[j].z;
            acc[ms][4 * (i0 + j) + 3] += v[j].w;
          }
        }
      }
    }
  if (t == 0) *counter = 0;
  return true;
}

// The order in which a block walks its work: items (tile group, k-tiles [kb, ke)), the same for the
// producer and the consumers of every CTA of a cluster (items are per cluster; TileRaster says
// which tile of the group each CTA takes).
//   Without stream-K: work units u = first, first + step, ... < units, unit u = tile group
//   u / splits, k-slice u % splits (splits = 1: whole tiles).
//   Stream-K (the persistent grid of `step` clusters; a tile-group count that is not a multiple of
//   it leaves the last wave partly idle): the first dp tile groups are walked whole, round robin as
//   above, and the K iterations of the other sk_tiles (the partial wave plus one full wave, so each
//   share spans more than one tile's K and a tile has few contributors) are cut into `step` equal
//   contiguous shares, share b = [b * I / step, (b + 1) * I / step) of I = sk_tiles * k_tiles, which
//   cross tile boundaries. A tile covered by more than one share is finished by reduce_partials.
struct WorkPlan {
  int units, first, step, splits;  // round-robin units (stream-K: the dp whole tile groups)
  int k_tiles;
  int dp;                          // stream-K: tile groups walked whole (0..dp-1); sk tiles follow
  long long sk_iters;              // I: k-tiles of the stream-K tiles together (0: none)
  long long sk_begin, sk_end;      // this cluster's share of them

  __device__ __forceinline__ static WorkPlan make(int tile_units, int splits, bool streamk, int k_tiles, int first,
                                                 int step) {
    WorkPlan p{tile_units * splits, first, step, splits, k_tiles, tile_units, 0, 0, 0};
    if (!streamk) return p;
    const int rem = tile_units % step;
    const int sk_tiles = rem == 0 ? 0 : rem + (tile_units >= step ? step : 0);
    const long long iters = static_cast<long long>(sk_tiles) * k_tiles;
    if (iters < step) return p;  // a share under one k-tile: walk whole tiles
    p.dp = tile_units - sk_tiles;
    p.units = p.dp;
    p.sk_iters = iters;
    p.sk_begin = p.share_begin(first);
    p.sk_end = p.share_begin(first + 1);
    return p;
  }
  __device__ __forceinline__ long long share_begin(int b) const { return b * sk_iters / step; }
  // The share holding stream-K k-tile x: the largest b with share_begin(b) <= x.
  __device__ __forceinline__ int share_of(long long x) const {
    return static_cast<int>(((x + 1) * step + sk_iters - 1) / sk_iters) - 1;
  }
};

struct WorkItem {
  int tile_unit;  // tile group (raster index)
  int kb, ke;     // k-tiles [kb, ke) of it
  int split;      // split-K slice (0 without)
  int sk_tile;    // stream-K tile index (tile_unit - dp), -1 for a round-robin unit
};

// Cursor over a WorkPlan: next() yields this cluster's items in order.
struct WorkCursor {
  int u;
  long long it;
  __device__ __forceinline__ explicit WorkCursor(const WorkPlan& p) : u(p.first), it(p.sk_begin) {}
  __device__ __forceinline__ bool next(const WorkPlan& p, WorkItem& w) {
    if (u < p.units) {
      w.tile_unit = u / p.splits;
      w.split = u % p.splits;
      w.kb = static_cast<int>((static_cast<long long>(p.k_tiles) * w.split) / p.splits);
      w.ke = static_cast<int>((static_cast<long long>(p.k_tiles) * (w.split + 1)) / p.splits);
      w.sk_tile = -1;
      u += p.step;
      return true;
    }
    if (it < p.sk_end) {
      const long long t = it / p.k_tiles;
      const long long end = (t + 1) * p.k_tiles < p.sk_end ? (t + 1) * p.k_tiles : p.sk_end;
      w.sk_tile = static_cast<int>(t);
      w.tile_unit = p.dp + w.sk_tile;
      w.split = 0;
      w.kb = static_cast<int>(it - t * p.k_tiles);
      w.ke = static_cast<int>(end - t * p.k_tiles);
      it = end;
      return true;
    }
    return false;
  }
};

// Where a tile group lies and which of its tiles this CTA computes. Tile groups form a grid of
// units_m x units_n (cluster rows x cluster columns); RASTER 0 walks it in bands of `group` rows,
// column by column inside a band, RASTER 1 in bands of `group` columns, row by row (GROUP_M 1:
// row-major, column-major). CTA rank r of a 2 x 1 cluster takes tile row 2 um + r, of a 1 x 2
// cluster tile column 2 un + r.
template <typename CL, int RASTER>
struct TileRaster {
  int units_m, units_n, group;
  unsigned rank;  // CTA rank in the cluster
  __device__ __forceinline__ void tile(int unit, int& tm, int& tn) const {
    int um, un;
    if constexpr (RASTER == kRasterColumns) {
      ktune_gemm_sm90_detail::raster(unit, units_n, units_m, group, un, um);
    } else {
      ktune_gemm_sm90_detail::raster(unit, units_m, units_n, group, um, un);
    }
    tm = um * CL::kM + (CL::kM == 2 ? static_cast<int>(rank) : 0);
    tn = un * CL::kN + (CL::kN == 2 ? static_cast<int>(rank) : 0);
  }
};

// What a block's consumers need to walk their work: the plan, the raster, the cluster rank, the
// stream-K workspace slots and the shared-memory addresses.
template <typename Raster>
struct BlockWork {
  WorkPlan plan;
  Raster raster;                // tile groups -> this CTA's tiles
  unsigned stages, full, empty; // shared addresses: the ring, full[0], empty[0]
  unsigned char* epi;           // this warp's staged-epilogue area (epilogue 1 and 2)
  const ktune_tensor_map* tmC;  // C as a TMA map (epilogue 2)
  unsigned char* flag;          // the split-K "last CTA" flag
};

// A load with acquire semantics at GPU scope (split-K band reduction: the tile's arrivals counter).
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Named barriers 2 and 3 order the ping-pong mainloops (0 is __syncthreads, 1 the consumers'
// barrier in splitk_reduce): warpgroup w waits on 2 + w with its 128 threads (bar.sync) until the
// other warpgroup's 128 threads arrive on it (bar.arrive, no wait).
__device__ __forceinline__ void order_wait(int bar) { asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void order_arrive(int bar) { asm volatile("bar.arrive %0, 256;\n" ::"r"(bar) : "memory"); }

// Releases stage `stage` to the producer(s): one arrival per consumer warp on empty[stage] of this
// CTA and, in a 2-CTA cluster, of the peer (it multicast half of the stage's shared operand here).
template <typename CL, typename W>
__device__ __forceinline__ void release_stage(const W& w, int stage) {
  if ((threadIdx.x & 31) != 0) return;
  mbar_arrive(w.empty + 8 * stage);
  if constexpr (CL::kSize == 2) mbar_arrive_remote(w.empty + 8 * stage, w.raster.rank ^ 1u);
}

// One consumer warpgroup's main loop over k-tiles [kt_begin, kt_end) of a work unit, from ring
// position (s, phase) on, which it advances past them: waits on full[s], issues the stage's
// wgmmas into acc (zeroed first) for rows [row0, row0 + kWgM) of the tile, and releases the
// previous stage once its wgmmas have retired (wait_group 1). Returns the last stage, still held,
// with its wgmmas possibly in flight (finish_mainloop waits for them and releases it).
template <typename Cfg, typename CL, typename W, int MS, int ACC>
__device__ __forceinline__ int mainloop(float (&acc)[MS][ACC], const W& w, int& s, int& phase, int kt_begin,
                                        int kt_end, int row0) {
#pragma unroll
  for (int ms = 0; ms < MS; ++ms)
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[ms][i] = 0.0f;
  int prev = -1;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    mbar_wait(w.full + 8 * s, static_cast<unsigned>(phase));
#pragma unroll
    for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
    wgmma_fence();
    const unsigned st = w.stages + s * Cfg::kStageBytes;
    mma_stage<typename Cfg::In, Cfg::kBlockM, Cfg::kBlockN, Cfg::kKK, MS, ACC>(acc, st, st + Cfg::kABytes, row0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous stage's wgmmas have retired: release it
#pragma unroll
    for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
    if (prev >= 0) release_stage<CL>(w, prev);
    prev = s;
    if (++s == Cfg::kStages) {
      s = 0;
      phase ^= 1;
    }
  }
  return prev;
}

template <typename CL, typename W, int MS, int ACC>
__device__ __forceinline__ void finish_mainloop(float (&acc)[MS][ACC], const W& w, int prev) {
  wgmma_wait<0>();
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
  if (prev >= 0) release_stage<CL>(w, prev);
}

// Writes rows [row0, row0 + kWgM) x columns [col0, col0 + BLOCK_N) of C with the configured epilogue.
template <typename Cfg, typename W, int MS, int ACC>
__device__ __forceinline__ void store_tile(const float (&acc)[MS][ACC], const W& w,
                                           typename Cfg::Out* __restrict__ C, int M, int N, int row0, int col0,
                                           float alpha, float beta) {
  if constexpr (Cfg::kEpilogue == 2) {
    epilogue_tma<typename Cfg::Out, Cfg::kBlockN, MS, ACC>(acc, smem_u32(w.epi), w.tmC, C, M, N, row0, col0, alpha,
                                                           beta);
  } else if constexpr (Cfg::kEpilogue == 1) {
    epilogue_staged<typename Cfg::Out, Cfg::kBlockN, Cfg::kEpiPitch, MS, ACC>(acc, w.epi, C, M, N, row0, col0, alpha,
                                                                            beta);
  } else {
    epilogue_direct<typename Cfg::Out, MS, ACC>(acc, C, M, N, row0, col0, alpha, beta);
  }
}

// Sums column band `slice` of a split tile (each consumer thread's n8 blocks [slice kBand, (slice +
// 1) kBand), kBand = BLOCK_N / 8 / SPLITS) over its SPLITS fp32 partials in slice (= K) order, and
// writes that band of C from registers with 4-byte stores. term(c, ms, g) loads contributor c's
// float4 of n8 block g of m64 slice ms for the calling thread (the fragment order in which
// reduce_partials lays out a slot). Every term's loads are issued before the first add: one round
// trip to wherever the partials are, not SPLITS (all of them take as many registers as the
// accumulators, dead by then). The first term is taken as is (no 0 + x: the sign of a zero
// survives), so the sum is bitwise reduce_partials's.
template <typename Cfg, int MS, int ACC, int SPLITS, typename Term>
__device__ __forceinline__ void sum_band_and_store(Term term, typename Cfg::Out* __restrict__ C,
                                                   int M, int N, int row0, int col0, float alpha,
                                                   float beta, int slice) {
  constexpr int kGroups = ACC / 4;         // n8 blocks per m64 slice and thread: one float4 each
  constexpr int kBand = kGroups / SPLITS;  // of them summed and written by this CTA
  static_assert(kGroups % SPLITS == 0, "whole n8 blocks per band");
  const int g0 = slice * kBand;
  float4 v[SPLITS][MS][kBand];
#pragma unroll
  for (int c = 0; c < SPLITS; ++c)
#pragma unroll
    for (int ms = 0; ms < MS; ++ms)
#pragma unroll
      for (int j = 0; j < kBand; ++j) v[c][ms][j] = term(c, ms, g0 + j);
#pragma unroll
  for (int c = 1; c < SPLITS; ++c)
#pragma unroll
    for (int ms = 0; ms < MS; ++ms)
#pragma unroll
      for (int j = 0; j < kBand; ++j) {
        v[0][ms][j].x += v[c][ms][j].x;
        v[0][ms][j].y += v[c][ms][j].y;
        v[0][ms][j].z += v[c][ms][j].z;
        v[0][ms][j].w += v[c][ms][j].w;
      }
  const int t = static_cast<int>(threadIdx.x) - 128;
  const int lt = t & 127, warp = lt >> 5, lane = lt & 31;
  const bool vec_ok = (N & 1) == 0;
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) {
    const int r = row0 + ms * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < kBand; ++j) {
      const int c = col0 + (g0 + j) * 8 + (lane & 3) * 2;
      const float4& s = v[0][ms][j];
      ktune_gemm_store::store_pair<typename Cfg::Out>(C, M, N, r, c, s.x, s.y, alpha, beta, vec_ok);
      ktune_gemm_store::store_pair<typename Cfg::Out>(C, M, N, r + 8, c, s.z, s.w, alpha, beta,
                                                      vec_ok);
    }
  }
}

// REDUCE 1: split-K within one cluster (non-persistent grid, one work item per CTA). The SPLITS
// CTAs of a cluster are the k-slices of one tile, CTA rank = slice. After its main loop each stores
// its fp32 partial into its own stage ring, idle by then, in fragment order (element i of consumer
// thread t at [i / 4][t][i % 4], as reduce_partials lays out a workspace slot); after a cluster
// barrier, CTA r sums column band r of the tile over every CTA's partial through distributed
// shared memory (sum_band_and_store) and writes that band of C. Nothing goes through global
// memory, and every CTA reads 1 / SPLITS of the partials instead of the last one reading all of
// them (bench/NOTES.md, "cluster split-K"). Every thread of the block, the producer's included,
// meets that barrier once and the kernel's last one, so no partial goes away while a peer still
// reads it.
template <typename Cfg, int MS, int ACC, int SPLITS, typename W>
__device__ __forceinline__ void reduce_in_cluster(const float (&acc)[MS][ACC], const W& w,
                                                  typename Cfg::Out* __restrict__ C, int M, int N, int row0,
                                                  int col0, float alpha, float beta, int slice) {
  constexpr int kT = Cfg::kThreads - 128;  // consumer threads
  constexpr int kGroups = ACC / 4;
  static_assert(static_cast<long long>(Cfg::kStages) * Cfg::kStageBytes >= 4LL * Cfg::kBlockM * Cfg::kBlockN,
                "the fp32 partial fits the stage ring");
  const int t = static_cast<int>(threadIdx.x) - 128;
  const auto at = [t](unsigned base, int ms, int g) {
    return base + static_cast<unsigned>(((ms * kGroups + g) * kT + t) * 16);
  };
  // Each warpgroup waited only for its own wgmmas: the other's may still read the ring.
  ktune_gemm_sm90_detail::named_barrier(kT);
#pragma unroll
  for (int ms = 0; ms < MS; ++ms)
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      st_shared_f4(at(w.stages, ms, g), make_float4(acc[ms][4 * g], acc[ms][4 * g + 1], acc[ms][4 * g + 2],
                                                   acc[ms][4 * g + 3]));
  cluster_sync();  // every partial of the tile written (release) and visible here (acquire)
  const auto term = [&](int c, int ms, int g) {
    return ld_cluster_f4(at(cluster_map(w.stages, static_cast<unsigned>(c)), ms, g));
  };
  sum_band_and_store<Cfg, MS, ACC, SPLITS>(term, C, M, N, row0, col0, alpha, beta, slice);
}

// REDUCE 2: split-K summed in bands by all of a tile's k-slices, through the workspace. Needs every
// CTA of the grid resident at once (the manifest offers it only on the persistent grid, at most
// max_active_clusters clusters): a slice waits for its tile's other slices, which must not wait for
// it to leave. Each stores its partial to its slot `base + slice * BLOCK_M * BLOCK_N` (fragment
// order, as reduce_partials), counts itself on *counter, waits until all SPLITS have, and sums and
// writes column band `slice` (sum_band_and_store: bitwise the sum of REDUCE 0 and 1). Against
// REDUCE 0 the tail after the last slice's main loop is one L2 round trip for 1 / SPLITS of the
// partials on every slice's SM, not SPLITS partials read by one. With a persistent grid that
// walks several units per CTA, a wait names only slices of the same or the next round of units,
// whose CTAs finish their earlier rounds without waiting on this one (grid >= 2 * SPLITS
// clusters). The counter: SPLITS first arrivals, then SPLITS second ones made after the wait
// passed; the last of those resets it, so it is zero at entry and exit and no slice spins on a
// counter already reset.
template <typename Cfg, int MS, int ACC, int SPLITS>
__device__ __forceinline__ void reduce_in_bands(const float (&acc)[MS][ACC],
                                                float* __restrict__ base, int* __restrict__ counter,
                                                typename Cfg::Out* __restrict__ C, int M, int N,
                                                int row0, int col0, float alpha, float beta,
                                                int slice) {
  constexpr int kT = Cfg::kThreads - 128;  // consumer threads
  constexpr int kGroups = ACC / 4;
  constexpr long long kSlot =
      static_cast<long long>(Cfg::kBlockM) * Cfg::kBlockN;  // floats per partial
  const int t = static_cast<int>(threadIdx.x) - 128;
  float4* mine4 = reinterpret_cast<float4*>(base + slice * kSlot);
#pragma unroll
  for (int ms = 0; ms < MS; ++ms)
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      mine4[(ms * kGroups + g) * kT + t] =
          make_float4(acc[ms][4 * g], acc[ms][4 * g + 1], acc[ms][4 * g + 2], acc[ms][4 * g + 3]);
  __threadfence();
  ktune_gemm_sm90_detail::named_barrier(kT);  // every thread's part of the partial is out
  if (t == 0) {
    atomicAdd(counter, 1);
    while (ld_acquire_gpu(counter) < SPLITS) __nanosleep(32);
    if (atomicAdd(counter, 1) == 2 * SPLITS - 1) atomicExch(counter, 0);
  }
  ktune_gemm_sm90_detail::named_barrier(kT);
  __threadfence();
  const float4* base4 = reinterpret_cast<const float4*>(base);
  const auto term = [base4, t](int c, int ms, int g) {
    return __ldcg(base4 + c * (kSlot / 4) + (ms * kGroups + g) * kT + t);
  };
  sum_band_and_store<Cfg, MS, ACC, SPLITS>(term, C, M, N, row0, col0, alpha, beta, slice);
}

// SCHEDULE 0: consumer warpgroup cw computes rows [cw * kWgM, (cw + 1) * kWgM) of every work item.
// An item that covers only part of its tile's K range (a split-K slice, a stream-K piece) hands its
// partial to reduce_partials, and the CTA that arrives last writes the tile. Workspace slots:
// split-K (tile, split); stream-K two per CTA, (CTA, 0) for the piece its share starts with and
// (CTA, 1) for the one it ends with (a share that crosses no tile boundary has one piece, slot 0),
// so no slot is written twice in a launch. REDUCE 1 and 2: split-K items are summed by
// reduce_in_cluster or reduce_in_bands instead, over the tile's SPLITS CTAs.
template <typename Cfg, typename CL, int MS, int ACC, int REDUCE, int SPLITS, typename W>
__device__ __forceinline__ void consume_cooperative(const W& w, typename Cfg::Out* __restrict__ C,
                                                    float* __restrict__ workspace,
                                                    int* __restrict__ tile_counters, int M, int N,
                                                    float alpha, float beta, int cw) {
  constexpr long long kSlot = static_cast<long long>(Cfg::kBlockM) * Cfg::kBlockN;  // floats per partial
  const WorkPlan& p = w.plan;
  const int rank = static_cast<int>(w.raster.rank);
  int s = 0, phase = 0;
  WorkCursor cur(p);
  WorkItem it;
  while (cur.next(p, it)) {
    int tm, tn;
    w.raster.tile(it.tile_unit, tm, tn);
    float acc[MS][ACC];
    const int prev = mainloop<Cfg, CL>(acc, w, s, phase, it.kb, it.ke, cw * Cfg::kWgM);
    finish_mainloop<CL>(acc, w, prev);
    const int tile = it.tile_unit * CL::kSize + rank;  // counter index
    if constexpr (REDUCE == 1) {
      reduce_in_cluster<Cfg, MS, ACC, SPLITS>(acc, w, C, M, N, tm * Cfg::kBlockM + cw * Cfg::kWgM,
                                              tn * Cfg::kBlockN, alpha, beta, it.split);
      continue;
    } else if constexpr (REDUCE == 2) {
      reduce_in_bands<Cfg, MS, ACC, SPLITS>(
          acc, workspace + static_cast<long long>(tile) * SPLITS * kSlot, tile_counters + tile, C,
          M, N, tm * Cfg::kBlockM + cw * Cfg::kWgM, tn * Cfg::kBlockN, alpha, beta, it.split);
      continue;
    } else if (p.splits > 1) {
      float* base = workspace + static_cast<long long>(tile) * p.splits * kSlot;
      const auto slot = [base](int c) { return base + c * kSlot; };
      if (!reduce_partials<Cfg, MS, ACC>(acc, base + it.split * kSlot, slot, p.splits, false, tile_counters + tile,
                                         w.flag))
        continue;  // another CTA finishes this tile
    } else if (it.sk_tile >= 0 && (it.kb > 0 || it.ke < p.k_tiles)) {
      const long long t0 = static_cast<long long>(it.sk_tile) * p.k_tiles;
      const int b0 = p.share_of(t0);                   // the shares covering this tile, in K order
      const int n = p.share_of(t0 + p.k_tiles - 1) - b0 + 1;
      // Share b's piece of this tile is its first one when the share starts inside the tile.
      const auto slot = [&p, workspace, t0, rank, b0](int c) {
        const int b = b0 + c;
        return workspace + ((static_cast<long long>(b) * CL::kSize + rank) * 2 + (p.share_begin(b) >= t0 ? 0 : 1)) *
                               kSlot;
      };
      if (!reduce_partials<Cfg, MS, ACC>(acc, slot(p.first - b0), slot, n, p.first == b0, tile_counters + tile,
                                         w.flag))
        continue;
    }
    store_tile<Cfg>(acc, w, C, M, N, tm * Cfg::kBlockM + cw * Cfg::kWgM, tn * Cfg::kBlockN, alpha, beta);
  }
}

// SCHEDULE 1: consumer warpgroup cw computes whole tiles, the block's work units 2 i + cw (no
// split-K). Its mainloop starts only once the other warpgroup has issued every wgmma of the unit
// before (order barrier 2 + cw), and it lets the other one go (barrier 2 + (cw ^ 1)) as soon as
// its own are issued, before waiting for them and running its epilogue: the epilogue overlaps the
// other warpgroup's MMAs. An arrive is sent only when the other warpgroup has a unit to start, so
// every bar.arrive meets a bar.sync. Ring positions of the other's units are stepped over; since
// the units before have all been waited for, each stage's earlier fills are complete when a
// warpgroup waits on it, and the parity of its wait names the fill it needs.
template <typename Cfg, typename CL, int MS, int ACC, typename W>
__device__ __forceinline__ void consume_pingpong(const W& w, typename Cfg::Out* __restrict__ C, int M, int N,
                                                 float alpha, float beta, int cw) {
  int s = 0, phase = 0;
  int local = 0;  // index of u among this block's units
  const WorkPlan& p = w.plan;
  for (int u = p.first; u < p.units; u += p.step, ++local) {
    if ((local & 1) != cw) {  // the other warpgroup's unit: step over its k-tiles in the ring
      s += p.k_tiles;
      phase ^= (s / Cfg::kStages) & 1;
      s %= Cfg::kStages;
      continue;
    }
    if (local > 0) order_wait(2 + cw);
    int tm, tn;
    w.raster.tile(u, tm, tn);
    float acc[MS][ACC];
    const int prev = mainloop<Cfg, CL>(acc, w, s, phase, 0, p.k_tiles, 0);
    if (u + p.step < p.units) order_arrive(2 + (cw ^ 1));
    finish_mainloop<CL>(acc, w, prev);
    store_tile<Cfg>(acc, w, C, M, N, tm * Cfg::kBlockM, tn * Cfg::kBlockN, alpha, beta);
  }
}

}  // namespace ktune_gemm_tma_detail

// grid: any number of blocks, a multiple of the cluster size CS = CLUSTER_M * CLUSTER_N (units =
// ceil(tiles_m / CLUSTER_M) * ceil(tiles_n / CLUSTER_N) tile groups; one cluster per group, or
// max_active_clusters for the persistent schedule), launched with cluster dimension (CS, 1, 1);
// block: (CONSUMERS + 1) * 128 threads; dynamic shared memory TmaConfig::kSmemBytes. workspace:
// split-K partials (REDUCE 0 and 2), tiles * SPLITS * BLOCK_M * BLOCK_N floats, or stream-K
// partials, 2 * sk_ctas * BLOCK_M * BLOCK_N floats (every slot written before it is read; a grid of
// more than sk_ctas blocks walks whole tiles); tile_counters: one per tile, zero at entry and exit.
// STREAMK = 1: the persistent grid's last, partial wave of tiles is spread over every cluster
// (WorkPlan). tmA: bf16/fp16 2-D map over A (dims {K, M}, box {64, BLOCK_M / CLUSTER_N}, 128-byte
// swizzle); tmB: over B (dims {K, N}, box {64, BLOCK_N / CLUSTER_M}); tmC: over C (EPILOGUE 2: dims
// {N, M}, box {128 bytes of outputs, 16}, 128-byte swizzle; any map otherwise, unused).
//
// 2-CTA clusters: the two CTAs take adjacent tiles that need one operand tile in common, and each
// loads half of it and multicasts that half into both CTAs. CLUSTER_M = 2: vertically adjacent
// tiles (tile rows 2p and 2p + 1, same tile column) share B; CTA rank r loads B rows [r, r + 1) *
// BLOCK_N / 2 (L2 -> SM traffic per stage: 32 KB per CTA instead of 48 KB at 128x256x64).
// CLUSTER_N = 2: horizontally adjacent tiles share A; rank r loads A rows [r, r + 1) * BLOCK_M / 2
// (the larger saving where BLOCK_M > BLOCK_N: 256x128x64, 32 KB instead of 48 KB). A stage may be
// refilled only when the consumers of *both* CTAs have released it, so empty[s] counts 2 * 4 *
// readers warp arrivals (one local, one remote per consumer warp). Where tiles_m (tiles_n) is odd,
// the second CTA of the last cluster row (column) computes a tile past M (N): zero-filled operand,
// every store masked.

template <typename TIn, typename TOut, int BLOCK_M, int BLOCK_N, int BLOCK_K, int STAGES, int CONSUMERS,
          int GROUP_M, int EPILOGUE, int CLUSTER_M, int SPLITS, int SCHEDULE, int STREAMK, int CLUSTER_N, int RASTER,
          int REDUCE>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
    ktune_gemm_tma(const __grid_constant__ ktune_tensor_map tmA, const __grid_constant__ ktune_tensor_map tmB,
                   TOut* __restrict__ C, const __grid_constant__ ktune_tensor_map tmC,
                   float* __restrict__ workspace, int* __restrict__ tile_counters, int sk_ctas, int M, int N, int K,
                   float alpha, float beta) {
  using namespace ktune_gemm_tma_detail;
  using Cfg = TmaConfig<TIn, TOut, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, CONSUMERS, EPILOGUE, SCHEDULE>;
  using CL = ClusterShape<CLUSTER_M, CLUSTER_N>;
  using Raster = TileRaster<CL, RASTER>;
  constexpr int splits = SPLITS;
  static_assert(SPLITS >= 1, "at least one k-slice per tile");
  static_assert(SCHEDULE == kCooperative || SPLITS == 1, "ping-pong: whole tiles, no split-K");
  static_assert(STREAMK == 0 || (SCHEDULE == kCooperative && SPLITS == 1), "stream-K: cooperative, no split-K");
  static_assert(RASTER == kRasterRows || RASTER == kRasterColumns, "raster by tile rows or by tile columns");
  static_assert(REDUCE != 1 || (SPLITS > 1 && CLUSTER_M * CLUSTER_N == 1 && EPILOGUE == 0),
                "cluster split-K: the cluster is the tile's k-slices; its epilogue writes bands "
                "from registers");
  static_assert(REDUCE != 2 || (SPLITS > 1 && EPILOGUE == 0),
                "band split-K: bands are written from registers");
  static_assert(REDUCE >= 0 && REDUCE <= 2, "REDUCE: workspace, cluster or bands");
  constexpr int MS = Cfg::kMS, ACC = Cfg::kAcc;
  constexpr int kCS = CL::kSize;
  constexpr int kAPart = BLOCK_M / CLUSTER_N;  // A rows each CTA of a cluster loads
  constexpr int kBPart = BLOCK_N / CLUSTER_M;  // B rows each CTA of a cluster loads
  extern __shared__ __align__(1024) unsigned char gemm_tma_smem[];
  const unsigned raw = smem_u32(gemm_tma_smem);
  const unsigned stages = (raw + 1023u) & ~1023u;  // same offset in every CTA (multicast relies on it)
  const unsigned full = stages + Cfg::kBarOffset;  // full[s] at full + 8 s, empty[s] at full + 8 (STAGES + s)
  const unsigned empty = full + 8 * STAGES;

  const int tid = static_cast<int>(threadIdx.x);
  const unsigned rank = kCS == 2 ? cluster_ctarank() : 0u;
  if (tid == 0) {
    prefetch_tensormap(&tmA);
    prefetch_tensormap(&tmB);
    if constexpr (EPILOGUE == 2) prefetch_tensormap(&tmC);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 4 * Cfg::kReaders * kCS);
    }
    fence_barrier_init();
  }
  if constexpr (kCS == 2) cluster_sync();  // the peer's barriers exist before any remote use
  else __syncthreads();

  const int units_m = ktune_dev::ceil_div(ktune_dev::ceil_div(M, BLOCK_M), CLUSTER_M);  // rows of clusters
  const int units_n = ktune_dev::ceil_div(ktune_dev::ceil_div(N, BLOCK_N), CLUSTER_N);  // columns of clusters
  const int tile_units = units_m * units_n;
  // GROUP_M counts tiles; a band holds GROUP_M / (cluster extent along the band) clusters.
  constexpr int kBandExtent = RASTER == kRasterColumns ? CLUSTER_N : CLUSTER_M;
  const Raster raster{units_m, units_n, GROUP_M / kBandExtent > 1 ? GROUP_M / kBandExtent : 1, rank};
  const int first = static_cast<int>(blockIdx.x) / kCS, step = static_cast<int>(gridDim.x) / kCS;
  const int k_tiles = ktune_dev::ceil_div(K, BLOCK_K);
  // Stream-K needs a workspace slot pair per CTA: with more CTAs than sk_ctas, whole tiles only.
  const WorkPlan plan =
      WorkPlan::make(tile_units, splits, STREAMK == 1 && static_cast<int>(gridDim.x) <= sk_ctas, k_tiles, first, step);
  // Cluster split-K pairs one item per CTA with one cluster barrier, in clusters of SPLITS CTAs: a
  // persistent grid or another cluster shape is a launch error, refused here, not deadlocked.
  if constexpr (REDUCE == 1) {
    if (plan.units != static_cast<int>(gridDim.x) || cluster_nctarank() != SPLITS) __trap();
  }
  // Warpgroup index through a shuffle: the compiler then knows it is warp-uniform and keeps what
  // derives from it (the consumers' rows, their wgmma descriptors) in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);

  if (wg == 0) {
    // ---- producer: one thread issues every TMA load ----
    if constexpr (CONSUMERS == 2) setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) {
      int s = 0, use = 0;  // stage and how often it was filled before
      WorkCursor cur(plan);
      WorkItem it;
      while (cur.next(plan, it)) {
        int tm, tn;
        raster.tile(it.tile_unit, tm, tn);
        const int m0 = tm * BLOCK_M, n0 = tn * BLOCK_N;
        for (int kt = it.kb; kt < it.ke; ++kt) {
          if (use > 0) {
            mbar_wait(empty + 8 * s, static_cast<unsigned>((use - 1) & 1));
          }
          const unsigned st = stages + s * Cfg::kStageBytes;
          mbar_arrive_expect_tx(full + 8 * s, Cfg::kStageBytes);
#pragma unroll
          for (int cb = 0; cb < Cfg::kCB; ++cb) {
            const int k0 = kt * BLOCK_K + cb * 64;
            const unsigned a_dst = st + cb * BLOCK_M * 128, b_dst = st + Cfg::kABytes + cb * BLOCK_N * 128;
            if constexpr (CLUSTER_N == 2) {  // the pair's common A tile, half from each CTA
              tma_load_2d_multicast(a_dst + rank * kAPart * 128, &tmA, k0, m0 + static_cast<int>(rank) * kAPart,
                                    full + 8 * s, 0x3);
            } else {
              tma_load_2d(a_dst, &tmA, k0, m0, full + 8 * s);
            }
            if constexpr (CLUSTER_M == 2) {  // the pair's common B tile, half from each CTA
              tma_load_2d_multicast(b_dst + rank * kBPart * 128, &tmB, k0, n0 + static_cast<int>(rank) * kBPart,
                                    full + 8 * s, 0x3);
            } else {
              tma_load_2d(b_dst, &tmB, k0, n0, full + 8 * s);
            }
          }
          if (++s == STAGES) {
            s = 0;
            ++use;
          }
        }
      }
    }
    if constexpr (REDUCE == 1) cluster_sync();  // the consumers' partials barrier (reduce_in_cluster)
  } else {
    // ---- consumers ----
    if constexpr (CONSUMERS == 2) setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;
    unsigned char* base = gemm_tma_smem + (stages - raw);
    const BlockWork<Raster> w{plan, raster, stages, full, empty,
                              base + STAGES * Cfg::kStageBytes + ((tid - 128) >> 5) * Cfg::kEpiWarpBytes, &tmC,
                              base + Cfg::kFlagOffset};
    if constexpr (SCHEDULE == kPingpong) {
      consume_pingpong<Cfg, CL, MS, ACC>(w, C, M, N, alpha, beta, cw);
    } else {
      consume_cooperative<Cfg, CL, MS, ACC, REDUCE, SPLITS>(w, C, workspace, tile_counters, M, N,
                                                            alpha, beta, cw);
    }
    // The last TMA stores must have read their boxes before the block's shared memory goes away.
    if constexpr (EPILOGUE == 2) {
      if ((tid & 31) == 0) bulk_wait_group_read<0>();
    }
  }
  // A CTA of a cluster leaves only when its peer no longer multicasts into it or arrives on its
  // barriers, or reads its split-K partial (every thread, the producer warps included, reaches
  // this point).
  if constexpr (kCS == 2 || REDUCE == 1) cluster_sync();
}

#endif  // KTUNE_GEMM_TMA_CUH_
