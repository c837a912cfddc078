// gemm_sm90.cuh — ktune's Hopper GEMM (sm_90a): wgmma.mma_async fed from a cp.async shared-memory
// ring in the 128-byte-swizzle layout. C = alpha * A * B + beta * C, fp32 accumulation.
//
//   A: M x K, row-major (A[m*K+k]);  B: K x N, column-major (B[n*K+k], nn.Linear's weight);
//   both K-major, the layout wgmma reads without transposition. C: M x N, row-major, never read
//   when beta == 0. Only this layout ("rc") is implemented (static_assert below).
//
// Header-free: only "ktune_common.cuh"; every wgmma, mbarrier, async-copy and fence is inline PTX.
// No TMA: ktune passes only pointers and scalars (no host-built tensor map), so tiles are copied
// with 16-byte cp.async (LDGSTS), zero-filled out of bounds.
//
// Measured on the H200 (bench/NOTES.md): 128x256x64, 4 stages, 2 consumer warpgroups, multistage,
// staged epilogue: 618-630 TF/s at 8192^3 bf16 (0.86-0.88x cuBLAS in the same run).
//
// Block = one BLOCK_M x BLOCK_N output tile (grid = tiles, grouped by GROUP_M tile rows for L2
// reuse). CONSUMERS warpgroups (128 threads each) run the MMAs; consumer warpgroup w owns rows
// [w * WG_M, (w+1) * WG_M) of the tile, WG_M = BLOCK_M / CONSUMERS, as WG_M / 64 slices of
// wgmma.m64n{BLOCK_N}k16 (accumulators: WG_M / 64 * BLOCK_N / 2 floats per thread).
//
// SPECIALIZED = 0 ("multistage"): the consumers also copy. Per k-tile kt: wait for their own
//   copies of tile kt (cp.async.wait_group), fence.proxy.async (their generic-proxy writes become
//   visible to the async proxy wgmma reads through), __syncthreads, copy tile kt + STAGES - 2 into
//   the stage of tile kt - 2 (whose wgmmas every warpgroup has retired before the barrier), issue
//   tile kt's wgmmas, and wgmma.wait_group 1 (tile kt-1's retire; tile kt's stay in flight).
// SPECIALIZED = 1 or 2 ("warp-specialized"): warpgroup 0 is a producer that only copies (tile kt
//   into stage kt % STAGES once empty[stage] says its previous tile was released); CONSUMERS
//   warpgroups wait on full[stage], issue the tile's wgmmas, wait for the previous tile's
//   (wait_group 1) and release that tile's stage (one arrival per consumer warp on empty). With two
//   consumer warpgroups setmaxnreg moves registers from the producer (40) to the consumers (232).
//   How a stage is published:
//   1: LAG = STAGES - 2 tiles after copying tile kt, the producer waits for its own copies of it
//      (cp.async.wait_group LAG), fences them into the async proxy and arrives on full (128
//      arrivals). LAG = STAGES - 2 is the largest lag that cannot deadlock, and it chains the
//      publication of tile kt to the release of tile kt - 2. Measured 20% slower than 2 on the
//      H200 (bench/NOTES.md); kept for the bench harness only (not in the manifest's space).
//   2: right after copying tile kt the producer issues cp.async.mbarrier.arrive.noinc on full:
//      the arrival happens when its copies land, with no producer involvement; each consumer
//      thread executes fence.proxy.async after its wait on full, before the wgmmas (the proxy fence
//      sits on the causality path from the copies to the wgmma reads). The producer runs up to
//      STAGES tiles ahead.
//
// Epilogue (EPILOGUE = kEpilogue for ktune's kernel): 0 = straight from the accumulators (4- or
// 8-byte stores, 8 rows per warp store); 1 = through shared memory: after every consumer retired
// its wgmmas (barrier), each consumer warp converts its 16 x BLOCK_N slice of one m64 slice to the
// output type in a private padded area of the (now idle) stages, then writes whole rows with
// 16-byte stores (beta: 16-byte loads of C; alpha * acc is rounded to the output type first).
//
// Shared memory (dynamic, base rounded up to 1024 B): [mbarriers | pad | stage 0 | stage 1 | ...];
// a stage is the A tile (BLOCK_M rows) then the B tile (BLOCK_N rows). A tile of ROWS rows is
// BLOCK_K / 64 column blocks of ROWS x 64 elements (128 B per row); inside a column block, row r's
// 16-byte chunk c sits at r * 128 + ((c ^ (r % 8)) * 16): the 128-byte-swizzle K-major layout
// (8-row x 128-byte atoms, 1024 B apart = the descriptor's stride byte offset). The k16 step kk of
// a column block starts 32 * kk bytes into it; the hardware applies the XOR to the absolute
// address, so every column block starts on a 1024-byte boundary (descriptor base offset 0).
//
// Host side (manifest gemm_sm90.yaml) must keep `smem` equal to Sm90Config::kSmemBytes.
#ifndef KTUNE_GEMM_SM90_CUH_
#define KTUNE_GEMM_SM90_CUH_

#include "ktune_common.cuh"
#include "ktune_gemm_store.cuh"

namespace ktune_gemm_sm90_detail {

using ktune_gemm_store::store_pair;

// ---- PTX wrappers --------------------------------------------------------------------------------
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// 16-byte async copy global -> shared; zero-fills (reads nothing) when !valid.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's completed generic-proxy shared-memory writes visible to the async proxy
// (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Arrives on the mbarrier once all of this thread's prior cp.async copies have landed (the
// arrival is counted in the barrier's initial count: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Barrier 1 among the first `threads` threads that reach it (the consumer warpgroups).
__device__ __forceinline__ void named_barrier(int threads) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` of the mbarrier has completed (acquire, CTA scope).
// KTUNE_SM90_WATCHDOG (bench builds only) traps after ~2^32 cycles instead of hanging.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
#ifdef KTUNE_SM90_WATCHDOG
  const long long t0 = clock64();
#endif
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
#ifdef KTUNE_SM90_WATCHDOG
    if (!done && clock64() - t0 > (1ll << 32)) __trap();
#endif
  } while (!done);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
// Pins the accumulators in registers across the wgmma.fence / wait statements (no code).
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor, K-major, 128-byte swizzle: start address >> 4 (bits 0-13),
// leading byte offset 1 (unused for swizzled K-major layouts), stride byte offset 1024 >> 4 = 64
// (bits 32-45: next 8-row atom), base offset 0, swizzle mode 1 = 128 B (bits 62-63). Adding
// bytes >> 4 to the descriptor moves its start address (addresses < 256 KB never carry out of
// the 14-bit field).
__device__ __forceinline__ unsigned long long smem_desc_sw128(unsigned addr) {
  return static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

// d[0 .. N/2) += A (64 x 16, descriptor da) * B (16 x N, descriptor db), fp32 accumulators in the
// m64nNk16 D layout: d[4i + j] holds row 16 * warp + lane / 4 + 8 * (j / 2), column 8i + 2 * (lane %
// 4) + (j % 2). Both operands K-major (imm-trans 0), scale-d 1 (accumulate).
template <typename T, int N> struct Wgmma;
// The accumulators' operand numbers (%0 .. %127) and constraints (d[0] .. d[127]), 16 a macro:
// a width of N takes the first N / 32 of each; the descriptors follow as %(N / 2), %(N / 2 + 1).
#define KTUNE_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KTUNE_WGMMA_R1 \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KTUNE_WGMMA_R2 \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define KTUNE_WGMMA_R3 \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KTUNE_WGMMA_R4 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define KTUNE_WGMMA_R5 \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define KTUNE_WGMMA_R6 \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define KTUNE_WGMMA_R7 \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define KTUNE_WGMMA_D0                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])
#define KTUNE_WGMMA_D1                                                                           \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),     \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
      "+f"(d[30]), "+f"(d[31])
#define KTUNE_WGMMA_D2                                                                           \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]),     \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), \
      "+f"(d[46]), "+f"(d[47])
#define KTUNE_WGMMA_D3                                                                           \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),     \
      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), \
      "+f"(d[62]), "+f"(d[63])
#define KTUNE_WGMMA_D4                                                                           \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),     \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
      "+f"(d[78]), "+f"(d[79])
#define KTUNE_WGMMA_D5                                                                           \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]),     \
      "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), \
      "+f"(d[94]), "+f"(d[95])
#define KTUNE_WGMMA_D6                                                                          \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), \
      "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]),       \
      "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define KTUNE_WGMMA_D7                                                                    \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]),     \
      "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), \
      "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KTUNE_WGMMA(TYPE, PTX, N, REGS, DESCS, ...)                                        \
  template <>                                                                              \
  struct Wgmma<TYPE, N> {                                                                  \
    static __device__ __forceinline__ void run(float (&d)[N / 2], unsigned long long da,   \
                                               unsigned long long db) {                    \
      asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " {" REGS \
                   "}, " DESCS ", 1, 1, 1, 0, 0;\n"                                        \
                   : __VA_ARGS__                                                           \
                   : "l"(da), "l"(db));                                                    \
    }                                                                                      \
  };
// The operand lists of 64, 80, 96 and 128 accumulators (n128, n160, n192, n256).
#define KTUNE_WGMMA_R64 KTUNE_WGMMA_R0 ", " KTUNE_WGMMA_R1 ", " KTUNE_WGMMA_R2 ", " KTUNE_WGMMA_R3
#define KTUNE_WGMMA_R80 KTUNE_WGMMA_R64 ", " KTUNE_WGMMA_R4
#define KTUNE_WGMMA_R96 KTUNE_WGMMA_R80 ", " KTUNE_WGMMA_R5
#define KTUNE_WGMMA_R128 KTUNE_WGMMA_R96 ", " KTUNE_WGMMA_R6 ", " KTUNE_WGMMA_R7
#define KTUNE_WGMMA_D64 KTUNE_WGMMA_D0, KTUNE_WGMMA_D1, KTUNE_WGMMA_D2, KTUNE_WGMMA_D3
#define KTUNE_WGMMA_D80 KTUNE_WGMMA_D64, KTUNE_WGMMA_D4
#define KTUNE_WGMMA_D96 KTUNE_WGMMA_D80, KTUNE_WGMMA_D5
#define KTUNE_WGMMA_D128 KTUNE_WGMMA_D96, KTUNE_WGMMA_D6, KTUNE_WGMMA_D7
// n128 and n256 (gemm_sm90's tiles and gemm_tma's), n160 and n192 (gemm_tma's 128x160, 128x192
// and 192x192 tiles, whose counts fill waves where 128x256 ones leave SMs idle).
KTUNE_WGMMA(ktune_bf16, "bf16", 128, KTUNE_WGMMA_R64, "%64, %65", KTUNE_WGMMA_D64)
KTUNE_WGMMA(ktune_fp16, "f16", 128, KTUNE_WGMMA_R64, "%64, %65", KTUNE_WGMMA_D64)
KTUNE_WGMMA(ktune_bf16, "bf16", 160, KTUNE_WGMMA_R80, "%80, %81", KTUNE_WGMMA_D80)
KTUNE_WGMMA(ktune_fp16, "f16", 160, KTUNE_WGMMA_R80, "%80, %81", KTUNE_WGMMA_D80)
KTUNE_WGMMA(ktune_bf16, "bf16", 192, KTUNE_WGMMA_R96, "%96, %97", KTUNE_WGMMA_D96)
KTUNE_WGMMA(ktune_fp16, "f16", 192, KTUNE_WGMMA_R96, "%96, %97", KTUNE_WGMMA_D96)
KTUNE_WGMMA(ktune_bf16, "bf16", 256, KTUNE_WGMMA_R128, "%128, %129", KTUNE_WGMMA_D128)
KTUNE_WGMMA(ktune_fp16, "f16", 256, KTUNE_WGMMA_R128, "%128, %129", KTUNE_WGMMA_D128)
#undef KTUNE_WGMMA
#undef KTUNE_WGMMA_R0
#undef KTUNE_WGMMA_R1
#undef KTUNE_WGMMA_R2
#undef KTUNE_WGMMA_R3
#undef KTUNE_WGMMA_R4
#undef KTUNE_WGMMA_R5
#undef KTUNE_WGMMA_R6
#undef KTUNE_WGMMA_R7
#undef KTUNE_WGMMA_D0
#undef KTUNE_WGMMA_D1
#undef KTUNE_WGMMA_D2
#undef KTUNE_WGMMA_D3
#undef KTUNE_WGMMA_D4
#undef KTUNE_WGMMA_D5
#undef KTUNE_WGMMA_D6
#undef KTUNE_WGMMA_D7
#undef KTUNE_WGMMA_R64
#undef KTUNE_WGMMA_R80
#undef KTUNE_WGMMA_R96
#undef KTUNE_WGMMA_R128
#undef KTUNE_WGMMA_D64
#undef KTUNE_WGMMA_D80
#undef KTUNE_WGMMA_D96
#undef KTUNE_WGMMA_D128

// ---- compile-time configuration ------------------------------------------------------------------
template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int STAGES, int CONSUMERS, int SPECIALIZED>
struct Sm90Config {
  static constexpr int kConsumerThreads = CONSUMERS * 128;
  static constexpr int kThreads = (CONSUMERS + (SPECIALIZED ? 1 : 0)) * 128;
  static constexpr int kLoaderThreads = SPECIALIZED ? 128 : kConsumerThreads;
  static constexpr int kWgM = BLOCK_M / CONSUMERS;  // rows per consumer warpgroup
  static constexpr int kMS = kWgM / 64;             // m64 slices per consumer warpgroup
  static constexpr int kAcc = BLOCK_N / 2;          // accumulators per slice per thread
  static constexpr int kKK = BLOCK_K / 16;          // k16 steps per k-tile
  static constexpr int kABytes = BLOCK_M * BLOCK_K * 2;
  static constexpr int kBBytes = BLOCK_N * BLOCK_K * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kBarBytes = 128;             // full[STAGES], empty[STAGES] (8 B each)
  // Must equal the manifest's `smem`: STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 + 1152
  // (the barriers plus the worst-case rounding of the stages' start up to 1024 B).
  static constexpr int kSmemBytes = STAGES * kStageBytes + kBarBytes + 1024;
  static constexpr int kLag = STAGES - 2;           // SPECIALIZED 1: tiles between copy and publish
  // Staged epilogue: per consumer warp, 16 rows of BLOCK_N outputs, rows padded so that the
  // fragment writes (8 rows x 4 lanes per store) hit distinct banks.
  template <typename TOut>
  static __host__ __device__ constexpr int epi_pitch() { return BLOCK_N * int(sizeof(TOut)) + 8 * int(sizeof(TOut)); }
  template <typename TOut>
  static __host__ __device__ constexpr int epi_warp_bytes() { return 16 * epi_pitch<TOut>(); }

  static_assert(BLOCK_K == 64 || BLOCK_K == 128, "BLOCK_K is one or two 64-element column blocks");
  static_assert(BLOCK_N == 128 || BLOCK_N == 256, "wgmma n128 or n256");
  static_assert(BLOCK_M % (64 * CONSUMERS) == 0, "each consumer warpgroup owns whole m64 slices");
  static_assert(kMS * kAcc <= 128, "at most 128 fp32 accumulators per thread");
  static_assert(STAGES >= 3 && 2 * STAGES * 8 <= kBarBytes, "3..8 stages");
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
  static_assert(SPECIALIZED >= 0 && SPECIALIZED <= 2, "0 multistage, 1/2 warp-specialized");

  // Copy mapping of a ROWS x BLOCK_K operand tile over kLoaderThreads threads: thread t copies
  // 16-byte chunk t % kCPR of rows t / kCPR + i * kRowStep. kRowStep is a multiple of 8, so every
  // row a thread copies has the same swizzle key (row % 8) and the same in-row offset.
  static constexpr int kCPR = BLOCK_K / 8;  // chunks per tile row
  static constexpr int kRowStep = kLoaderThreads / kCPR;
  static_assert(kRowStep % 8 == 0, "rows per copy pass must be a multiple of the 8-row atom");
  static_assert(BLOCK_M % kRowStep == 0 && BLOCK_N % kRowStep == 0, "copy passes cover whole tiles");
  // Byte offset of chunk `c` (0 .. kCPR-1) of row `r` in a ROWS-row operand tile.
  static __host__ __device__ __forceinline__ unsigned tile_offset(int rows, int r, int c) {
    return static_cast<unsigned>((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
  }
  // Byte offset (within an operand tile of `rows` rows) where the descriptor of k16 step kk of
  // the 64-row slice starting at row r0 begins.
  static __host__ __device__ __forceinline__ unsigned desc_offset(int rows, int r0, int kk) {
    return static_cast<unsigned>((kk >> 2) * rows * 128 + r0 * 128 + (kk & 3) * 32);
  }
};

// Threadblock rasterization (as the mma.sync gemm template): linear tile id -> (tile_m, tile_n),
// column by column inside bands of GROUP_M tile rows.
__host__ __device__ __forceinline__ void raster(int pid, int tiles_m, int tiles_n, int group_m, int& tm,
                                                int& tn) {
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

// Copies one operand's k-tiles: the global operand is a g_rows x K row-major matrix (K
// contiguous); the tile holds rows row0 .. row0 + ROWS - 1, zero-filled past g_rows and past K.
// REQUIRES K % 8 == 0 (every 16-byte chunk is wholly inside or outside the matrix). Host+device so
// that the layout emulation (bench/kernel_check/gemm_sm90_check.cu --layout-test) can drive it.
template <typename T, typename Cfg, int ROWS>
struct TileLoader {
  static constexpr int kItems = ROWS / Cfg::kRowStep;
  const T* base;       // the operand (a valid address for zero-filled chunks)
  const T* ptr;        // this thread's item 0 at k = 0
  long long item_step; // elements between this thread's items
  int rows_left;       // rows from item 0's row to the matrix's end
  int col;             // this thread's first column (k) in a k-tile
  unsigned off;        // byte offset of item 0 in the tile

  __host__ __device__ __forceinline__ TileLoader(const T* b, int g_rows, int K, int row0, int tid) {
    const int c = tid % Cfg::kCPR;
    const int r = tid / Cfg::kCPR;
    base = b;
    col = c * 8;
    rows_left = g_rows - row0 - r;
    ptr = b + static_cast<long long>(row0 + r) * K + col;
    item_step = static_cast<long long>(Cfg::kRowStep) * K;
    off = Cfg::tile_offset(ROWS, r, c);
  }
  // Calls f(byte offset in the tile, source, valid) for this thread's chunks of k-tile kt.
#pragma nv_exec_check_disable
  template <typename F>
  __host__ __device__ __forceinline__ void for_items(int kt, int K, F&& f) const {
    const int k0 = kt * Cfg::kCPR * 8;
    const bool col_ok = k0 + col < K;
    const T* p = ptr + k0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const bool ok = col_ok && i * Cfg::kRowStep < rows_left;
      f(off + static_cast<unsigned>(i * Cfg::kRowStep * 128), ok ? p + i * item_step : base, ok);
    }
  }
  // Issues the copies of k-tile kt into the tile at shared address dst.
  __device__ __forceinline__ void copy(unsigned dst, int kt, int K) const {
    for_items(kt, K, [dst](unsigned o, const T* src, bool ok) { cp_async16(dst + o, src, ok); });
  }
};


// One consumer warpgroup's wgmmas for the k-tile in the stage at shared address `stage`.
template <typename TIn, typename Cfg, int BLOCK_M, int BLOCK_N, int KK, int MS, int ACC>
__device__ __forceinline__ void mma_tile(float (&acc)[MS][ACC], unsigned stage, int wg_row0) {
  const unsigned long long da0 = smem_desc_sw128(stage);
  const unsigned long long db0 = smem_desc_sw128(stage + Cfg::kABytes);
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
#pragma unroll
    for (int ms = 0; ms < MS; ++ms) {
      const unsigned long long da = da0 + (Cfg::desc_offset(BLOCK_M, wg_row0 + ms * 64, kk) >> 4);
      const unsigned long long db = db0 + (Cfg::desc_offset(BLOCK_N, 0, kk) >> 4);
      Wgmma<TIn, BLOCK_N>::run(acc[ms], da, db);
    }
  }
}

// Writes a consumer warpgroup's accumulators to C (fragment layout of m64nNk16, see Wgmma).
template <typename TOut, int MS, int ACC>
__device__ __forceinline__ void epilogue(const float (&acc)[MS][ACC], TOut* __restrict__ C, int M, int N,
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
      store_pair<TOut>(C, M, N, r, c, acc[ms][4 * i], acc[ms][4 * i + 1], alpha, beta, vec_ok);
      store_pair<TOut>(C, M, N, r + 8, c, acc[ms][4 * i + 2], acc[ms][4 * i + 3], alpha, beta, vec_ok);
    }
  }
}

// Staged epilogue of one consumer warpgroup (see the header): `area` is this warp's private
// Cfg::epi_warp_bytes<TOut>() bytes of shared memory, already free of wgmma reads.
template <typename TOut, typename Cfg, int BLOCK_N, int MS, int ACC>
__device__ __forceinline__ void epilogue_staged(const float (&acc)[MS][ACC], unsigned char* area,
                                                TOut* __restrict__ C, int M, int N, int row0, int col0,
                                                float alpha, float beta) {
  constexpr int kPitch = Cfg::template epi_pitch<TOut>();
  constexpr int kVec = 16 / int(sizeof(TOut));     // outputs per 16-byte chunk
  constexpr int kChunks = BLOCK_N / kVec;          // chunks per row
  static_assert((16 * kChunks) % 32 == 0, "whole warp passes over the staged rows");
  const int t = static_cast<int>(threadIdx.x) & 127;
  const int warp = t >> 5, lane = t & 31;
  const bool vec_ok = (N % kVec) == 0;
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) {
    // fragment -> staged rows (lane: row lane / 4 and + 8, columns 8i + 2 (lane % 4) + {0, 1})
#pragma unroll
    for (int i = 0; i < ACC / 4; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned char* p = area + ((lane >> 2) + 8 * h) * kPitch + (i * 8 + (lane & 3) * 2) * int(sizeof(TOut));
        const float v0 = alpha * acc[ms][4 * i + 2 * h], v1 = alpha * acc[ms][4 * i + 2 * h + 1];
        if constexpr (sizeof(TOut) == 4) {
          *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<unsigned*>(p) = ktune_dev::pack2<TOut>(v0, v1);
        }
      }
    }
    __syncwarp();
    // staged rows -> C, 16-byte chunks, consecutive lanes on consecutive chunks of a row
    const int rbase = row0 + ms * 64 + warp * 16;
#pragma unroll
    for (int it = 0; it < 16 * kChunks / 32; ++it) {
      const int item = it * 32 + lane;
      const int r = item / kChunks, ch = item % kChunks;
      const int row = rbase + r, col = col0 + ch * kVec;
      if (row >= M || col >= N) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(area + r * kPitch + ch * 16);
      TOut* g = C + static_cast<long long>(row) * N + col;
      if (vec_ok && col + kVec <= N) {
        if (beta == 0.0f) {
          *reinterpret_cast<uint4*>(g) = v;
        } else {
          const uint4 o = *reinterpret_cast<const uint4*>(g);
          uint4 w;
          if constexpr (sizeof(TOut) == 4) {
            w.x = __float_as_uint(__uint_as_float(v.x) + beta * __uint_as_float(o.x));
            w.y = __float_as_uint(__uint_as_float(v.y) + beta * __uint_as_float(o.y));
            w.z = __float_as_uint(__uint_as_float(v.z) + beta * __uint_as_float(o.z));
            w.w = __float_as_uint(__uint_as_float(v.w) + beta * __uint_as_float(o.w));
          } else {
            const unsigned vs[4] = {v.x, v.y, v.z, v.w}, os[4] = {o.x, o.y, o.z, o.w};
            unsigned ws[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float a0, a1, b0, b1;
              ktune_dev::unpack2<TOut>(vs[e], a0, a1);
              ktune_dev::unpack2<TOut>(os[e], b0, b1);
              ws[e] = ktune_dev::pack2<TOut>(a0 + beta * b0, a1 + beta * b1);
            }
            w = make_uint4(ws[0], ws[1], ws[2], ws[3]);
          }
          *reinterpret_cast<uint4*>(g) = w;
        }
      } else {
        const TOut* sv = reinterpret_cast<const TOut*>(area + r * kPitch + ch * 16);
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

// Implementation choice that is not a tuning parameter: 0 direct, 1 staged. Staged measured +5-9%
// on the H200 at 4096^3 and 8192^3 for both pipelines (bench/NOTES.md, same-run A/B).
constexpr int kEpilogue = 1;

constexpr int kProducerRegs = 40;   // SPECIALIZED with 2 consumer warpgroups: 128*40 + 256*232
constexpr int kConsumerRegs = 232;  //   = 64512 <= 65536 registers per SM

template <typename TIn, typename TOut, int BLOCK_M, int BLOCK_N, int BLOCK_K, int STAGES, int CONSUMERS,
          int SPECIALIZED, int GROUP_M, int EPILOGUE>
__device__ __forceinline__ void gemm_sm90_body(const TIn* __restrict__ A, const TIn* __restrict__ B,
                                               TOut* __restrict__ C, int M, int N, int K, float alpha,
                                               float beta) {
  using Cfg = Sm90Config<BLOCK_M, BLOCK_N, BLOCK_K, STAGES, CONSUMERS, SPECIALIZED>;
  static_assert(sizeof(TIn) == 2, "inputs are 16-bit");
  constexpr int MS = Cfg::kMS, ACC = Cfg::kAcc, KK = Cfg::kKK;
  static_assert(EPILOGUE == 0 || CONSUMERS * 4 * Cfg::template epi_warp_bytes<TOut>() <= STAGES * Cfg::kStageBytes,
                "the staged epilogue must fit in the stages");

  extern __shared__ __align__(1024) unsigned char ktune_gemm_sm90_smem[];
  const unsigned smem_raw = smem_u32(ktune_gemm_sm90_smem);
  const unsigned bars = smem_raw;  // full[s] at bars + 8s, empty[s] at bars + 8 (STAGES + s)
  const unsigned stages = (smem_raw + Cfg::kBarBytes + 1023u) & ~1023u;

  const int tid = static_cast<int>(threadIdx.x);
  const int tiles_m = ktune_dev::ceil_div(M, BLOCK_M);
  const int tiles_n = ktune_dev::ceil_div(N, BLOCK_N);
  int tile_m, tile_n;
  raster(static_cast<int>(blockIdx.x), tiles_m, tiles_n, GROUP_M, tile_m, tile_n);
  const int m0 = tile_m * BLOCK_M;
  const int n0 = tile_n * BLOCK_N;
  const int k_tiles = ktune_dev::ceil_div(K, BLOCK_K);

  if constexpr (SPECIALIZED == 0) {
    // ---- multistage: every warpgroup copies and multiplies ----
    TileLoader<TIn, Cfg, BLOCK_M> load_a(A, M, K, m0, tid);
    TileLoader<TIn, Cfg, BLOCK_N> load_b(B, N, K, n0, tid);
    const int wg = tid >> 7;
    float acc[MS][ACC];
#pragma unroll
    for (int ms = 0; ms < MS; ++ms)
#pragma unroll
      for (int i = 0; i < ACC; ++i) acc[ms][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < k_tiles) {
        load_a.copy(stages + s * Cfg::kStageBytes, s, K);
        load_b.copy(stages + s * Cfg::kStageBytes + Cfg::kABytes, s, K);
      }
      cp_async_commit();
    }
    int rd = 0;               // stage of tile kt
    int wr = STAGES - 2;      // stage of tile kt + STAGES - 2
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<STAGES - 3>();  // this thread's copies of tile kt have landed
      fence_proxy_async();
      __syncthreads();              // everyone's have; tile kt-2's wgmmas retired in every warpgroup
      if (kt + STAGES - 2 < k_tiles) {
        load_a.copy(stages + wr * Cfg::kStageBytes, kt + STAGES - 2, K);
        load_b.copy(stages + wr * Cfg::kStageBytes + Cfg::kABytes, kt + STAGES - 2, K);
      }
      cp_async_commit();
#pragma unroll
      for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
      wgmma_fence();
      mma_tile<TIn, Cfg, BLOCK_M, BLOCK_N, KK, MS, ACC>(acc, stages + rd * Cfg::kStageBytes, wg * Cfg::kWgM);
      wgmma_commit();
      wgmma_wait<1>();
#pragma unroll
      for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
      rd = rd + 1 == STAGES ? 0 : rd + 1;
      wr = wr + 1 == STAGES ? 0 : wr + 1;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
    cp_async_wait<0>();
    if constexpr (EPILOGUE == 1) {
      __syncthreads();  // every warpgroup's wgmmas have retired: the stages are free
      unsigned char* area = ktune_gemm_sm90_smem + (stages - smem_raw) +
                            (tid >> 5) * Cfg::template epi_warp_bytes<TOut>();
      epilogue_staged<TOut, Cfg, BLOCK_N, MS, ACC>(acc, area, C, M, N, m0 + wg * Cfg::kWgM, n0, alpha, beta);
    } else {
      epilogue<TOut, MS, ACC>(acc, C, M, N, m0 + wg * Cfg::kWgM, n0, alpha, beta);
    }
  } else {
    // ---- warp-specialized: warpgroup 0 copies, warpgroups 1..CONSUMERS multiply ----
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        mbar_init(bars + 8 * s, 128);                              // full: every producer thread
        mbar_init(bars + 8 * (STAGES + s), 4 * CONSUMERS);         // empty: every consumer warp
      }
    }
    __syncthreads();
    const int wg = tid >> 7;
    if (wg == 0) {
      if constexpr (CONSUMERS == 2) setmaxnreg_dec<kProducerRegs>();
      TileLoader<TIn, Cfg, BLOCK_M> load_a(A, M, K, m0, tid);
      TileLoader<TIn, Cfg, BLOCK_N> load_b(B, N, K, n0, tid);
      if constexpr (SPECIALIZED == 1) {
        constexpr int LAG = Cfg::kLag;
        int s = 0, use = 0;  // stage of tile kt and how many times it was filled before
        int ps = 0;          // stage of tile kt - LAG
        for (int kt = 0; kt < k_tiles; ++kt) {
          if (use > 0) mbar_wait(bars + 8 * (STAGES + s), (use - 1) & 1);
          load_a.copy(stages + s * Cfg::kStageBytes, kt, K);
          load_b.copy(stages + s * Cfg::kStageBytes + Cfg::kABytes, kt, K);
          cp_async_commit();
          if (kt >= LAG) {
            cp_async_wait<LAG>();  // tile kt - LAG has landed (this thread's part)
            fence_proxy_async();
            mbar_arrive(bars + 8 * ps);
            ps = ps + 1 == STAGES ? 0 : ps + 1;
          }
          if (++s == STAGES) {
            s = 0;
            ++use;
          }
        }
        cp_async_wait<0>();
        fence_proxy_async();
        for (int t = k_tiles - LAG > 0 ? k_tiles - LAG : 0; t < k_tiles; ++t) {
          mbar_arrive(bars + 8 * ps);
          ps = ps + 1 == STAGES ? 0 : ps + 1;
        }
      } else {
        int s = 0, use = 0;
        for (int kt = 0; kt < k_tiles; ++kt) {
          if (use > 0) mbar_wait(bars + 8 * (STAGES + s), (use - 1) & 1);
          load_a.copy(stages + s * Cfg::kStageBytes, kt, K);
          load_b.copy(stages + s * Cfg::kStageBytes + Cfg::kABytes, kt, K);
          cp_async_mbar_arrive(bars + 8 * s);  // full[s] hears from this thread when they land
          if (++s == STAGES) {
            s = 0;
            ++use;
          }
        }
        cp_async_wait_all();
      }
    } else {
      if constexpr (CONSUMERS == 2) setmaxnreg_inc<kConsumerRegs>();
      const int cw = wg - 1;
      const bool leader = (tid & 31) == 0;
      float acc[MS][ACC];
#pragma unroll
      for (int ms = 0; ms < MS; ++ms)
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[ms][i] = 0.0f;
      int s = 0, phase = 0;  // stage of tile kt, parity of its fill
      int prev = STAGES - 1; // stage of tile kt - 1
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(bars + 8 * s, static_cast<unsigned>(phase));
        if constexpr (SPECIALIZED == 2) fence_proxy_async();  // the copies' writes -> async proxy
#pragma unroll
        for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
        wgmma_fence();
        mma_tile<TIn, Cfg, BLOCK_M, BLOCK_N, KK, MS, ACC>(acc, stages + s * Cfg::kStageBytes, cw * Cfg::kWgM);
        wgmma_commit();
        wgmma_wait<1>();  // tile kt - 1's wgmmas have retired: release its stage
#pragma unroll
        for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
        if (kt > 0 && leader) mbar_arrive(bars + 8 * (STAGES + prev));
        prev = s;
        if (++s == STAGES) {
          s = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < MS; ++ms) fence_regs(acc[ms]);
      if constexpr (EPILOGUE == 1) {
        // Every consumer's wgmmas have retired and every copy has landed (each was waited for on
        // full): the stages are free. The producer takes no part (it may have exited).
        named_barrier(Cfg::kConsumerThreads);
        unsigned char* area = ktune_gemm_sm90_smem + (stages - smem_raw) +
                              ((tid - 128) >> 5) * Cfg::template epi_warp_bytes<TOut>();
        epilogue_staged<TOut, Cfg, BLOCK_N, MS, ACC>(acc, area, C, M, N, m0 + cw * Cfg::kWgM, n0, alpha, beta);
      } else {
        epilogue<TOut, MS, ACC>(acc, C, M, N, m0 + cw * Cfg::kWgM, n0, alpha, beta);
      }
    }
  }
}

}  // namespace ktune_gemm_sm90_detail

// REQUIRES (the manifest's constraints): layout rc (A_ROW 1, B_ROW 0), K % 8 == 0, A, B and C
// 16-byte aligned. grid = ceil(M/BLOCK_M) * ceil(N/BLOCK_N) blocks of (CONSUMERS + (SPECIALIZED ?
// 1 : 0)) * 128 threads, dynamic smem = Sm90Config::kSmemBytes. `workspace` and `tile_counters` are unused.
template <typename TIn, typename TOut, int A_ROW, int B_ROW, int BLOCK_M, int BLOCK_N, int BLOCK_K,
          int STAGES, int CONSUMERS, int SPECIALIZED, int GROUP_M>
__global__ void __launch_bounds__((CONSUMERS + (SPECIALIZED ? 1 : 0)) * 128, 1)
    ktune_gemm_sm90(const TIn* __restrict__ A, const TIn* __restrict__ B, TOut* __restrict__ C,
                    float* __restrict__ workspace, int* __restrict__ tile_counters, int M, int N, int K,
                    float alpha, float beta) {
  static_assert(A_ROW == 1 && B_ROW == 0, "gemm_sm90 implements layout rc only (both operands K-major)");
  (void)workspace;
  (void)tile_counters;
  ktune_gemm_sm90_detail::gemm_sm90_body<TIn, TOut, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, CONSUMERS, SPECIALIZED,
                                         GROUP_M, ktune_gemm_sm90_detail::kEpilogue>(A, B, C, M, N, K, alpha,
                                                                                     beta);
}

#endif  // KTUNE_GEMM_SM90_CUH_
