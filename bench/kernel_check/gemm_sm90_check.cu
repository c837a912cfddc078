// gemm_sm90_check.cu — standalone check of the Hopper wgmma GEMM template
// (templates/gemm_sm90/gemm_sm90.cuh): correctness against an fp64-accumulating reference at
// awkward shapes (C NaN-poisoned), then timing against cuBLAS and the mma.sync template
// (templates/gemm/gemm.cuh, its large-shape heuristic pick) at 8192^3 and 4096^3, layout rc.
// Built with nvcc for sm_90a (the template needs wgmma/setmaxnreg), so no ktune, no NVRTC:
//
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I templates/common \
//        bench/kernel_check/gemm_sm90_check.cu -L/usr/local/cuda/lib64 -lcublas -o .gpu/sm90/gemm_sm90_check
//
// Options: --layout-test (host only, no GPU: emulates the copy mapping and the wgmma descriptor
//          reads of every config against a plain product), --no-timing, --no-check,
//          --runs N (timed launches per point, default 30), --filter S (configs whose name
//          contains S), --quick (8192^3 only), --profile S M N K (only: 3 launches of the configs
//          matching S at M x N x K, for ncu).
// Exit status: 0 all correct; 1 a correctness failure; 2 a CUDA error (e.g. the watchdog trap).
// See README.md beside this file ("gemm_sm90").
#define KTUNE_SM90_WATCHDOG 1  // an mbarrier wait that spins for ~2^32 cycles traps (no hang)
#include "../../templates/gemm_sm90/gemm_sm90.cuh"
#include "../../templates/gemm/gemm.cuh"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CUDA_CHECK(x)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::fflush(stdout);                                                                 \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)
#define CUBLAS_CHECK(x)                                                                    \
  do {                                                                                     \
    cublasStatus_t s_ = (x);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::printf("%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #x, (int)s_);       \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

enum class DType { bf16, fp16, fp32 };
const char* dtype_name(DType t) { return t == DType::bf16 ? "bf16" : t == DType::fp16 ? "fp16" : "fp32"; }
size_t dtype_bytes(DType t) { return t == DType::fp32 ? 4 : 2; }
cudaDataType cuda_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::fp16 ? CUDA_R_16F : CUDA_R_32F;
}
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<ktune_bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<ktune_fp16>() { return DType::fp16; }
template <> constexpr DType dtype_of<float>() { return DType::fp32; }

using LaunchFn = cudaError_t (*)(const void* A, const void* B, void* C, int M, int N, int K, float alpha,
                                 float beta, cudaStream_t s);
using LayoutFn = bool (*)(std::string& why);

struct Config {
  std::string name;
  DType tin, tout;
  int bm, bn, bk;
  int smem;
  LaunchFn launch;
  LayoutFn layout_test;  // null for the mma.sync reference config
  bool timed;
};

// ---- host emulation of the data movement (--layout-test) ------------------------------------------
// Copies one k-tile of random A (BM x K) and B (BN x K) through TileLoader::for_items into a byte
// array standing for shared memory (stage base at an address that is 1024-aligned, as the kernel
// arranges), then reads every consumer slice's operands the way wgmma reads a K-major
// 128B-swizzled descriptor (PTX ISA "Shared Memory Matrix Layout": element (row, k) of a 64 x 16
// (A) or N x 16 (B) operand whose descriptor starts at S lies at S + (row / 8) * SBO +
// (row % 8) * 128 + 2k, then bits [4,7) of the address XOR bits [7,10)), multiplies them with the
// descriptor offsets mma_tile uses, and compares with the plain product. Also checks each byte is
// written by exactly one chunk copy.
template <int BM, int BN, int BK, int ST, int CONS, int SPEC>
bool layout_emulation(std::string& why) {
  using Cfg = ktune_gemm_sm90_detail::Sm90Config<BM, BN, BK, ST, CONS, SPEC>;
  char buf[256];
  const int K = BK;              // one k-tile; tails: M, N short by a few rows, K short by 8
  for (int variant = 0; variant < 2; ++variant) {
    const int M = variant ? BM - 5 : BM, N = variant ? BN - 3 : BN, Kr = variant ? K - 8 : K;
    std::mt19937 rng(1234 + variant);
    std::uniform_int_distribution<int> dist(-8, 8);
    std::vector<ktune_bf16> A(size_t(M) * Kr), B(size_t(N) * Kr);
    std::vector<int> Av(A.size()), Bv(B.size());
    for (size_t i = 0; i < A.size(); ++i) { Av[i] = dist(rng); A[i].bits = 0; }
    for (size_t i = 0; i < B.size(); ++i) { Bv[i] = dist(rng); B[i].bits = 0; }
    const unsigned base = 3 * 1024;  // stage base (1024-aligned)
    std::vector<int> smem(base + Cfg::kStageBytes, 0);     // value per 2-byte slot (index = byte / 2)
    std::vector<int> writes(base + Cfg::kStageBytes, 0);
    auto copy_operand = [&](const std::vector<ktune_bf16>& G, const std::vector<int>& Gv, int rows, int g_rows,
                            unsigned dst, auto loader_tag) {
      using L = decltype(loader_tag);
      for (int tid = 0; tid < Cfg::kLoaderThreads; ++tid) {
        L ld(G.data(), g_rows, Kr, 0, tid);
        ld.for_items(0, Kr, [&](unsigned off, const ktune_bf16* src, bool ok) {
          const size_t e = size_t(src - G.data());
          for (int j = 0; j < 8; ++j) {
            const unsigned byte = dst + off + 2 * j;
            smem[byte / 2] = ok ? Gv[e + j] : 0;
            writes[byte / 2] += 1;
          }
        });
      }
      (void)rows;
    };
    copy_operand(A, Av, BM, M, base, ktune_gemm_sm90_detail::TileLoader<ktune_bf16, Cfg, BM>(A.data(), M, Kr, 0, 0));
    copy_operand(B, Bv, BN, N, base + Cfg::kABytes,
                 ktune_gemm_sm90_detail::TileLoader<ktune_bf16, Cfg, BN>(B.data(), N, Kr, 0, 0));
    for (unsigned i = base / 2; i < (base + Cfg::kStageBytes) / 2; ++i)
      if (writes[i] != 1) {
        std::snprintf(buf, sizeof buf, "slot byte %u written %d times", 2 * i, writes[i]);
        why = buf;
        return false;
      }
    auto read = [&](unsigned start, int row, int k) {  // hardware model of a descriptor read
      unsigned addr = start + (row / 8) * 1024 + (row % 8) * 128 + 2 * k;
      addr ^= ((addr >> 7) & 7) << 4;
      return smem[addr / 2];
    };
    for (int cw = 0; cw < CONS; ++cw)
      for (int ms = 0; ms < Cfg::kMS; ++ms) {
        const int r0 = cw * Cfg::kWgM + ms * 64;
        std::vector<long long> D(size_t(64) * BN, 0);
        for (int kk = 0; kk < Cfg::kKK; ++kk) {
          const unsigned sa = base + Cfg::desc_offset(BM, r0, kk);
          const unsigned sb = base + Cfg::kABytes + Cfg::desc_offset(BN, 0, kk);
          if ((sa & 15) || (sb & 15)) { why = "descriptor start not 16-byte aligned"; return false; }
          for (int m = 0; m < 64; ++m)
            for (int n = 0; n < BN; ++n)
              for (int k = 0; k < 16; ++k) D[size_t(m) * BN + n] += (long long)read(sa, m, k) * read(sb, n, k);
        }
        for (int m = 0; m < 64; ++m)
          for (int n = 0; n < BN; ++n) {
            long long ref = 0;
            const int gm = r0 + m;
            if (gm < M && n < N)
              for (int k = 0; k < Kr; ++k) ref += (long long)Av[size_t(gm) * Kr + k] * Bv[size_t(n) * Kr + k];
            if (D[size_t(m) * BN + n] != ref) {
              std::snprintf(buf, sizeof buf, "variant %d: slice cw=%d ms=%d row %d col %d: got %lld want %lld", variant,
                            cw, ms, m, n, D[size_t(m) * BN + n], ref);
              why = buf;
              return false;
            }
          }
      }
  }
  return true;
}

// Every BLOCK_M x BLOCK_N x BLOCK_K x CONSUMERS x loader shape of the manifest's space (STAGES does
// not change the layout), for --layout-test: the manifest's constraints, as constexpr.
template <int BM, int BN, int BK, int CONS, int SPEC>
constexpr bool space_valid() {
  const int loader = SPEC ? 128 : CONS * 128, step = loader / (BK / 8);
  return BM % (64 * CONS) == 0 && (BM / CONS / 64) * BN / 2 <= 128 && step % 8 == 0 && BM % step == 0 &&
         BN % step == 0 && 3 * (BM + BN) * BK * 2 + 1152 <= 232448;
}
template <int BM, int BN, int BK, int CONS, int SPEC>
int layout_space_one(int& tested) {
  if constexpr (space_valid<BM, BN, BK, CONS, SPEC>()) {
    std::string why;
    ++tested;
    if (!layout_emulation<BM, BN, BK, 3, CONS, SPEC>(why)) {
      std::printf("LAYOUT FAIL space %dx%dx%d c%d spec%d: %s\n", BM, BN, BK, CONS, SPEC, why.c_str());
      return 1;
    }
  }
  return 0;
}
template <int BM, int BN, int BK>
int layout_space_tile(int& tested) {
  return layout_space_one<BM, BN, BK, 1, 0>(tested) + layout_space_one<BM, BN, BK, 2, 0>(tested) +
         layout_space_one<BM, BN, BK, 1, 2>(tested) + layout_space_one<BM, BN, BK, 2, 2>(tested);
}
int layout_space(int& tested) {
  return layout_space_tile<64, 128, 64>(tested) + layout_space_tile<64, 128, 128>(tested) +
         layout_space_tile<64, 256, 64>(tested) + layout_space_tile<64, 256, 128>(tested) +
         layout_space_tile<128, 128, 64>(tested) + layout_space_tile<128, 128, 128>(tested) +
         layout_space_tile<128, 256, 64>(tested) + layout_space_tile<128, 256, 128>(tested) +
         layout_space_tile<256, 128, 64>(tested) + layout_space_tile<256, 128, 128>(tested) +
         layout_space_tile<256, 256, 64>(tested) + layout_space_tile<256, 256, 128>(tested);
}

// ---- launchers ------------------------------------------------------------------------------------
// The kernel body with another epilogue than ktune's kernel uses (kEpilogue), for same-run A/B.
template <typename TI, typename TO, int BM, int BN, int BK, int ST, int CONS, int SPEC, int GM, int EPI>
__global__ void __launch_bounds__((CONS + (SPEC ? 1 : 0)) * 128, 1)
    gemm_sm90_variant(const TI* __restrict__ A, const TI* __restrict__ B, TO* __restrict__ C, int M, int N, int K,
                      float alpha, float beta) {
  ktune_gemm_sm90_detail::gemm_sm90_body<TI, TO, BM, BN, BK, ST, CONS, SPEC, GM, EPI>(A, B, C, M, N, K, alpha, beta);
}

// EPI < 0: ktune's kernel (ktune_gemm_sm90, epilogue kEpilogue); else gemm_sm90_variant<..., EPI>.
template <typename TI, typename TO, int BM, int BN, int BK, int ST, int CONS, int SPEC, int GM, int EPI>
cudaError_t launch_sm90(const void* A, const void* B, void* C, int M, int N, int K, float alpha, float beta,
                        cudaStream_t s) {
  using Cfg = ktune_gemm_sm90_detail::Sm90Config<BM, BN, BK, ST, CONS, SPEC>;
  const dim3 grid(static_cast<unsigned>(((M + BM - 1) / BM) * ((N + BN - 1) / BN)));
  static bool attr_done = false;
  if constexpr (EPI < 0) {
    auto kernel = ktune_gemm_sm90<TI, TO, 1, 0, BM, BN, BK, ST, CONS, SPEC, GM>;
    if (!attr_done) {
      cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
      if (e != cudaSuccess) return e;
      attr_done = true;
    }
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, s>>>(static_cast<const TI*>(A), static_cast<const TI*>(B),
                                                         static_cast<TO*>(C), nullptr, nullptr, M, N, K, alpha, beta);
  } else {
    auto kernel = gemm_sm90_variant<TI, TO, BM, BN, BK, ST, CONS, SPEC, GM, EPI>;
    if (!attr_done) {
      cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
      if (e != cudaSuccess) return e;
      attr_done = true;
    }
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, s>>>(static_cast<const TI*>(A), static_cast<const TI*>(B),
                                                         static_cast<TO*>(C), M, N, K, alpha, beta);
  }
  return cudaGetLastError();
}

// The mma.sync template's large-shape pick (templates/gemm/gemm.yaml): 128x256x128 w2x4 s2 g8 xor.
template <typename TI, typename TO>
cudaError_t launch_mma(const void* A, const void* B, void* C, int M, int N, int K, float alpha, float beta,
                       cudaStream_t s) {
  using Cfg = ktune_gemm_detail::GemmConfig<1, 0, 128, 256, 128, 2, 4, 2, 1>;
  auto kernel = ktune_gemm<TI, TO, 1, 0, 128, 256, 128, 2, 4, 2, 8, 1, 1>;
  static bool attr_done = false;
  if (!attr_done) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    if (e != cudaSuccess) return e;
    attr_done = true;
  }
  const dim3 grid(static_cast<unsigned>(((M + 127) / 128) * ((N + 255) / 256)), 1, 1);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, s>>>(static_cast<const TI*>(A), static_cast<const TI*>(B),
                                                       static_cast<TO*>(C), nullptr, nullptr, M, N, K, alpha, beta);
  return cudaGetLastError();
}

std::string sm90_name(DType ti, DType to, int bm, int bn, int bk, int st, int cons, int spec, int gm, int epi) {
  char buf[160];
  const int e = epi < 0 ? ktune_gemm_sm90_detail::kEpilogue : epi;
  std::snprintf(buf, sizeof buf, "sm90 %s %s->%s %dx%dx%d s%d c%d g%d %s%s", spec == 0 ? "ms" : spec == 1 ? "ws1" : "ws2",
                dtype_name(ti), dtype_name(to), bm, bn, bk, st, cons, gm, e ? "staged" : "direct",
                epi < 0 ? "" : " (var)");
  return buf;
}

#define SM90X(TI, TO, BM, BN, BK, ST, CONS, SPEC, GM, EPI)                                                   \
  Config {                                                                                                 \
    sm90_name(dtype_of<TI>(), dtype_of<TO>(), BM, BN, BK, ST, CONS, SPEC, GM, EPI), dtype_of<TI>(),          \
        dtype_of<TO>(), BM, BN, BK, ktune_gemm_sm90_detail::Sm90Config<BM, BN, BK, ST, CONS, SPEC>::kSmemBytes, \
        &launch_sm90<TI, TO, BM, BN, BK, ST, CONS, SPEC, GM, EPI>,                                           \
        &layout_emulation<BM, BN, BK, ST, CONS, SPEC>, std::is_same<TI, TO>::value                           \
  }
#define SM90(...) SM90X(__VA_ARGS__, -1)

std::vector<Config> make_configs() {
  using bf = ktune_bf16;
  using hf = ktune_fp16;
  return {
      // warp-specialized, publication by cp.async.mbarrier.arrive (SPECIALIZED 2), bf16 -> bf16
      SM90(bf, bf, 128, 256, 64, 4, 2, 2, 8),
      SM90(bf, bf, 128, 256, 64, 4, 2, 2, 16),
      SM90(bf, bf, 128, 256, 64, 3, 2, 2, 8),
      SM90(bf, bf, 256, 128, 64, 4, 2, 2, 8),
      SM90(bf, bf, 128, 128, 64, 4, 2, 2, 8),
      SM90(bf, bf, 128, 128, 128, 3, 2, 2, 8),
      SM90(bf, bf, 128, 128, 64, 6, 1, 2, 8),
      SM90(bf, bf, 64, 256, 64, 4, 1, 2, 8),
      SM90(bf, bf, 64, 128, 64, 3, 1, 2, 1),
      SM90X(bf, bf, 128, 256, 64, 4, 2, 2, 8, 0),
      // warp-specialized, publication by wait_group + fence (SPECIALIZED 1; run 1's "ws")
      SM90(bf, bf, 128, 256, 64, 4, 2, 1, 8),
      // multistage (SPECIALIZED 0)
      SM90(bf, bf, 128, 256, 64, 4, 2, 0, 8),
      SM90(bf, bf, 128, 256, 64, 4, 2, 0, 16),
      SM90(bf, bf, 256, 128, 64, 4, 2, 0, 8),
      SM90(bf, bf, 128, 128, 64, 3, 2, 0, 8),
      SM90(bf, bf, 128, 128, 64, 5, 2, 0, 8),
      SM90(bf, bf, 64, 128, 64, 3, 1, 0, 1),
      SM90X(bf, bf, 128, 256, 64, 4, 2, 0, 8, 0),
      SM90X(bf, bf, 256, 128, 64, 4, 2, 0, 8, 0),
      // other input / output types (staged epilogue with 4-byte outputs, beta)
      SM90(hf, hf, 128, 256, 64, 4, 2, 2, 8),
      SM90(bf, float, 128, 256, 64, 4, 2, 2, 8),
      SM90(hf, float, 128, 128, 64, 4, 1, 0, 8),
      SM90(bf, hf, 64, 128, 64, 3, 1, 2, 1),
      SM90(bf, float, 128, 256, 64, 3, 2, 0, 8),
      SM90(hf, hf, 128, 256, 64, 4, 2, 0, 8),
      Config{"mma.sync gemm bf16->bf16 128x256x128 w2x4 s2 g8", DType::bf16, DType::bf16, 128, 256, 128,
             ktune_gemm_detail::GemmConfig<1, 0, 128, 256, 128, 2, 4, 2, 1>::kSmemBytes, &launch_mma<bf, bf>,
             nullptr, true},
  };
}

// ---- device helpers -------------------------------------------------------------------------------
__host__ __device__ inline float hash_uniform(unsigned long long i, unsigned seed) {
  unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<unsigned>(x >> 40)) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
}
template <typename T>
__global__ void fill_uniform(T* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = ktune_dev::from_float<T>(hash_uniform(i, seed));
}
// Selection matrix for the probe: A[m][k] = (k == (7m + 3) % K).
template <typename T>
__global__ void fill_select(T* p, int M, int K) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < size_t(M) * K; i += size_t(gridDim.x) * blockDim.x) {
    const int m = int(i / K), k = int(i % K);
    p[i] = ktune_dev::from_float<T>(k == (7 * m + 3) % K ? 1.0f : 0.0f);
  }
}
template <typename T>
__global__ void to_float_kernel(const T* p, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = ktune_dev::to_float(p[i]);
}
// Plain reference, rc layout: one thread per output, fp64 accumulation.
template <typename T>
__global__ void naive_gemm_rc(const T* A, const T* B, float* C, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  double s = 0;
  for (int k = 0; k < K; ++k)
    s += double(ktune_dev::to_float(A[size_t(m) * K + k])) * double(ktune_dev::to_float(B[size_t(n) * K + k]));
  C[size_t(m) * N + n] = float(s);
}

// sums (out - ref)^2 and ref^2 in doubles, counts NaNs (large-shape check against cuBLAS)
__global__ void diff_kernel(const float* out, const float* ref, size_t n, double* acc, unsigned long long* nans) {
  double num = 0, den = 0;
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float o = out[i], r = ref[i];
    if (isnan(o)) { ++bad; continue; }
    num += double(o - r) * double(o - r);
    den += double(r) * r;
  }
  atomicAdd(&acc[0], num);
  atomicAdd(&acc[1], den);
  if (bad) atomicAdd(nans, bad);
}

void fill(void* p, DType t, size_t n, unsigned seed) {
  if (t == DType::bf16) fill_uniform<<<1024, 256>>>(static_cast<ktune_bf16*>(p), n, seed);
  else if (t == DType::fp16) fill_uniform<<<1024, 256>>>(static_cast<ktune_fp16*>(p), n, seed);
  else fill_uniform<<<1024, 256>>>(static_cast<float*>(p), n, seed);
  CUDA_CHECK(cudaGetLastError());
}
void convert_to_float(const void* p, DType t, float* out, size_t n) {
  if (t == DType::bf16) to_float_kernel<<<1024, 256>>>(static_cast<const ktune_bf16*>(p), out, n);
  else if (t == DType::fp16) to_float_kernel<<<1024, 256>>>(static_cast<const ktune_fp16*>(p), out, n);
  else to_float_kernel<<<1024, 256>>>(static_cast<const float*>(p), out, n);
  CUDA_CHECK(cudaGetLastError());
}
void naive_ref(DType tin, int M, int N, int K, const void* A, const void* B, float* C) {
  const dim3 grid((N + 127) / 128, M);
  if (tin == DType::bf16)
    naive_gemm_rc<<<grid, 128>>>(static_cast<const ktune_bf16*>(A), static_cast<const ktune_bf16*>(B), C, M, N, K);
  else
    naive_gemm_rc<<<grid, 128>>>(static_cast<const ktune_fp16*>(A), static_cast<const ktune_fp16*>(B), C, M, N, K);
  CUDA_CHECK(cudaGetLastError());
}

// Row-major C (M x N) = A (M x K row-major) * B (N x K row-major)^T through cuBLAS (column-major):
// C^T = B^T A, i.e. op(B) = T on the N x K... expressed as cuBLAS C'(N x M) = B'(K x N)^T * A'(K x M).
void cublas_gemm_rc(cublasHandle_t h, int M, int N, int K, const void* A, const void* B, DType tin, void* C,
                    DType tout, float alpha, float beta, cudaStream_t s) {
  CUBLAS_CHECK(cublasSetStream(h, s));
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, cuda_type(tin), K, A, cuda_type(tin), K,
                            &beta, C, cuda_type(tout), N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

std::vector<float> to_host(const float* p, size_t n) {
  std::vector<float> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

double rel_l2(const std::vector<float>& out, const std::vector<float>& ref, size_t* nans) {
  double num = 0, den = 0;
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) {
      ++bad;
      continue;
    }
    const double diff = double(out[i]) - ref[i];
    num += diff * diff;
    den += double(ref[i]) * ref[i];
  }
  if (nans) *nans = bad;
  return std::sqrt(num / std::max(den, 1e-30));
}

int g_failures = 0;

// Where the wrong elements are: the first few, and counts by 8-row / 8-column group inside a tile.
void describe_errors(const Config& c, const std::vector<float>& out, const std::vector<float>& ref, int M, int N) {
  double rms = 0;
  for (float r : ref) rms += double(r) * r;
  rms = std::sqrt(rms / std::max<size_t>(1, ref.size()));
  const double thr = 0.05 * rms + 1e-3;
  std::vector<int> by_row(c.bm / 8, 0), by_col(c.bn / 8, 0);
  int shown = 0;
  size_t bad = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const float o = out[size_t(m) * N + n], r = ref[size_t(m) * N + n];
      if (std::isnan(o) || std::fabs(double(o) - r) > thr) {
        ++bad;
        by_row[(m % c.bm) / 8]++;
        by_col[(n % c.bn) / 8]++;
        if (shown < 6) {
          std::printf("      bad (%d, %d): got %g want %g\n", m, n, o, r);
          ++shown;
        }
      }
    }
  std::printf("      %zu of %zu bad (> %.2g); by row/8 in tile:", bad, out.size(), thr);
  for (int v : by_row) std::printf(" %d", v);
  std::printf("\n      by col/8 in tile:");
  for (int v : by_col) std::printf(" %d", v);
  std::printf("\n");
}

// Selection probe (after a failure): A[m][k] = (k == (7m+3) % K), so C[m][n] = B[n][(7m+3) % K]
// exactly; for wrong elements, print which B elements (n', k') hold the value that came out.
void probe(const Config& c, void* a, void* b, void* cbuf, float* outf) {
  const int M = c.bm, N = c.bn, K = 2 * c.bk;
  if (c.tin == DType::bf16) fill_select<<<256, 256>>>(static_cast<ktune_bf16*>(a), M, K);
  else fill_select<<<256, 256>>>(static_cast<ktune_fp16*>(a), M, K);
  fill(b, c.tin, size_t(N) * K, 99);
  CUDA_CHECK(cudaMemset(cbuf, 0xFF, size_t(M) * N * dtype_bytes(c.tout)));
  CUDA_CHECK(c.launch(a, b, cbuf, M, N, K, 1.0f, 0.0f, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  convert_to_float(cbuf, c.tout, outf, size_t(M) * N);
  float* bf;
  CUDA_CHECK(cudaMalloc(&bf, size_t(N) * K * 4));
  convert_to_float(b, c.tin, bf, size_t(N) * K);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = to_host(outf, size_t(M) * N), bv = to_host(bf, size_t(N) * K);
  CUDA_CHECK(cudaFree(bf));
  int shown = 0;
  size_t bad = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const int k = (7 * m + 3) % K;
      const float want = bv[size_t(n) * K + k], got = out[size_t(m) * N + n];
      if (got == want) continue;
      ++bad;
      if (shown >= 12) continue;
      ++shown;
      std::printf("      probe (m %d, n %d) wants B[%d][%d]=%g, got %g =", m, n, n, k, want, got);
      int hits = 0;
      for (int n2 = 0; n2 < N && hits < 4; ++n2)
        for (int k2 = 0; k2 < K && hits < 4; ++k2)
          if (bv[size_t(n2) * K + k2] == got) {
            std::printf(" B[%d][%d]", n2, k2);
            ++hits;
          }
      std::printf("%s\n", hits ? "" : " (no single element)");
    }
  std::printf("    probe %dx%dx%d: %zu of %d wrong\n", M, N, K, bad, M * N);
}

// ---- timing ---------------------------------------------------------------------------------------
std::string sm_clock() {
  FILE* f = popen("nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader 2>/dev/null", "r");
  if (!f) return "?";
  char buf[128] = {0};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  pclose(f);
  std::string v = ok ? buf : "?";
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}
double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v[v.size() / 2] + v[(v.size() - 1) / 2]) / 2;
}
template <typename F>
void time_samples(F&& run, int warmup, int runs, int sets, std::vector<float>& out) {
  cudaStream_t s = 0;
  for (int i = 0; i < warmup; ++i) run(i % sets, s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<cudaEvent_t> ev(2 * runs);
  for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < runs; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
    run((warmup + i) % sets, s);
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    out.push_back(ms);
  }
  for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  bool timing = true, check = true, layout_only = false, quick = false;
  int runs = 40;
  std::string filter;
  int prof_m = 0, prof_n = 0, prof_k = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    else if (!std::strcmp(argv[i], "--no-check")) check = false;
    else if (!std::strcmp(argv[i], "--layout-test")) layout_only = true;
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::max(20, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
    else if (!std::strcmp(argv[i], "--profile") && i + 4 < argc) {
      filter = argv[++i];
      prof_m = std::atoi(argv[++i]);
      prof_n = std::atoi(argv[++i]);
      prof_k = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--layout-test] [--no-timing] [--no-check] [--quick] [--runs N] [--filter S]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<Config> configs;
  for (auto& c : make_configs())
    if (filter.empty() || c.name.find(filter) != std::string::npos) configs.push_back(c);

  // ---- host emulation of copies + descriptor reads (no GPU needed) ----
  {
    int bad = 0;
    for (const auto& c : configs) {
      if (!c.layout_test) continue;
      std::string why;
      if (!c.layout_test(why)) {
        std::printf("LAYOUT FAIL %s: %s\n", c.name.c_str(), why.c_str());
        ++bad;
      }
    }
    int tested = 0;
    if (layout_only) bad += layout_space(tested);
    std::printf("layout emulation: %s (%zu configs%s)\n", bad ? "FAILURES" : "ALL PASS", configs.size(),
                layout_only ? (", + " + std::to_string(tested) + " tile/warpgroup shapes of the manifest's space").c_str()
                            : "");
    if (layout_only) return bad ? 1 : 0;
  }

  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MiB, smem opt-in %zu B; clock/power now: %s\n", prop.name,
              prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin,
              sm_clock().c_str());
  if (prof_m) {  // a few launches of the matching configs, for ncu
    void *a, *b, *c;
    CUDA_CHECK(cudaMalloc(&a, size_t(prof_m) * prof_k * 2));
    CUDA_CHECK(cudaMalloc(&b, size_t(prof_n) * prof_k * 2));
    CUDA_CHECK(cudaMalloc(&c, size_t(prof_m) * prof_n * 4));
    for (const auto& cf : configs) {
      fill(a, cf.tin, size_t(prof_m) * prof_k, 5);
      fill(b, cf.tin, size_t(prof_n) * prof_k, 6);
      for (int r = 0; r < 3; ++r) CUDA_CHECK(cf.launch(a, b, c, prof_m, prof_n, prof_k, 1.0f, 0.0f, 0));
      CUDA_CHECK(cudaDeviceSynchronize());
      std::printf("profiled %s at %dx%dx%d\n", cf.name.c_str(), prof_m, prof_n, prof_k);
    }
    return 0;
  }
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));

  std::vector<bool> passed(configs.size(), true);
  if (check) {
    struct Shape { int M, N, K; float beta; };
    const Shape shapes[] = {{128, 256, 64, 0.f},    {128, 256, 16, 0.f},    {77, 137, 200, 0.f},  {77, 137, 200, 0.5f},
                            {1000, 1000, 1032, 0.f}, {13, 4100, 4096, 0.f}, {1, 1, 8, 0.f},       {300, 520, 4104, 0.f},
                            {1100, 1300, 520, 0.f},  {2048, 1024, 1024, 0.5f}};
    size_t max_mn = 0, max_in = 0;
    for (const auto& s : shapes) {
      max_mn = std::max(max_mn, size_t(s.M) * s.N);
      max_in = std::max({max_in, size_t(s.M) * s.K, size_t(s.N) * s.K});
    }
    max_mn = std::max(max_mn, size_t(256) * 256);
    max_in = std::max(max_in, size_t(256) * 256);
    void *a, *b, *cbuf, *c0;
    float *ref, *cub, *outf, *c0f;
    CUDA_CHECK(cudaMalloc(&a, max_in * 2));
    CUDA_CHECK(cudaMalloc(&b, max_in * 2));
    CUDA_CHECK(cudaMalloc(&cbuf, max_mn * 4));
    CUDA_CHECK(cudaMalloc(&c0, max_mn * 4));
    CUDA_CHECK(cudaMalloc(&ref, max_mn * 4));
    CUDA_CHECK(cudaMalloc(&cub, max_mn * 4));
    CUDA_CHECK(cudaMalloc(&outf, max_mn * 4));
    CUDA_CHECK(cudaMalloc(&c0f, max_mn * 4));
    std::printf("\n== correctness (fp64-accumulating reference, cuBLAS cross-check; C NaN-poisoned when beta = 0) ==\n");
    unsigned seed = 11;
    for (const auto& s : shapes) {
      const int M = s.M, N = s.N, K = s.K;
      const size_t mn = size_t(M) * N;
      for (DType tin : {DType::bf16, DType::fp16}) {
        bool any = false;
        for (const auto& c : configs) any |= c.tin == tin;
        if (!any) continue;
        seed += 7;
        fill(a, tin, size_t(M) * K, seed);
        fill(b, tin, size_t(N) * K, seed + 1);
        naive_ref(tin, M, N, K, a, b, ref);
        cublas_gemm_rc(h, M, N, K, a, b, tin, cub, DType::fp32, 1.0f, 0.0f, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> ref0 = to_host(ref, mn);
        const double cublas_err = rel_l2(to_host(cub, mn), ref0, nullptr);
        if (!(cublas_err <= 1e-4))
          std::printf("  NOTE cuBLAS disagrees with the fp64 reference at %dx%dx%d %s: %.3e\n", M, N, K,
                      dtype_name(tin), cublas_err);
        for (size_t ci = 0; ci < configs.size(); ++ci) {
          const Config& c = configs[ci];
          if (c.tin != tin) continue;
          std::vector<float> want = ref0;
          if (s.beta != 0.0f) {
            fill(c0, c.tout, mn, seed + 2);
            convert_to_float(c0, c.tout, c0f, mn);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> c0h = to_host(c0f, mn);
            for (size_t i = 0; i < mn; ++i) want[i] += s.beta * c0h[i];
            CUDA_CHECK(cudaMemcpy(cbuf, c0, mn * dtype_bytes(c.tout), cudaMemcpyDeviceToDevice));
          } else {
            CUDA_CHECK(cudaMemset(cbuf, 0xFF, mn * dtype_bytes(c.tout)));  // NaN in bf16, fp16 and fp32
          }
          CUDA_CHECK(c.launch(a, b, cbuf, M, N, K, 1.0f, s.beta, 0));
          CUDA_CHECK(cudaDeviceSynchronize());
          convert_to_float(cbuf, c.tout, outf, mn);
          const std::vector<float> out = to_host(outf, mn);
          size_t nans = 0;
          const double err = rel_l2(out, want, &nans);
          const double tol = c.tout == DType::bf16 ? 2e-2 : c.tout == DType::fp16 ? 1e-2 : 5e-3;
          if (nans || !(err <= tol)) {
            std::printf("  FAIL %-44s M=%5d N=%5d K=%5d beta=%-3g rel L2 %.3e (tol %.0e), %zu NaN\n", c.name.c_str(),
                        M, N, K, s.beta, err, tol, nans);
            if (passed[ci]) describe_errors(c, out, want, M, N);
            passed[ci] = false;
            ++g_failures;
          } else {
            std::printf("  ok   %-44s M=%5d N=%5d K=%5d beta=%-3g rel L2 %.2e (cuBLAS %.1e)\n", c.name.c_str(), M, N,
                        K, s.beta, err, cublas_err);
          }
        }
      }
    }
    for (size_t ci = 0; ci < configs.size(); ++ci)
      if (!passed[ci]) {
        std::printf("  probe of %s:\n", configs[ci].name.c_str());
        probe(configs[ci], a, b, cbuf, outf);
      }
    std::printf("correctness: %d failure(s)\n", g_failures);
    for (void* p : {a, b, cbuf, c0}) CUDA_CHECK(cudaFree(p));
    for (float* p : {ref, cub, outf, c0f}) CUDA_CHECK(cudaFree(p));
  }

  if (timing) {
    struct TShape { int M, N, K; };
    std::vector<TShape> tshapes = {{8192, 8192, 8192}, {4096, 4096, 4096}};
    if (quick) tshapes.resize(1);
    void* cbuf;
    CUDA_CHECK(cudaMalloc(&cbuf, size_t(8192) * 8192 * 2));
    std::printf("\n== timing, rc (median of %d launches in 5 rotated rounds; inputs rotated over sets > 3x L2) ==\n",
                runs);
    struct Row { std::string shape, name; double us, tf, cublas_tf; };
    std::vector<Row> rows;
    for (const auto& ts : tshapes) {
      for (DType tin : {DType::bf16, DType::fp16}) {
        std::vector<const Config*> todo;
        for (size_t ci = 0; ci < configs.size(); ++ci)
          if (passed[ci] && configs[ci].timed && configs[ci].tin == tin &&
              size_t(configs[ci].smem) <= prop.sharedMemPerBlockOptin)
            todo.push_back(&configs[ci]);
        if (todo.empty()) continue;
        const size_t set_bytes = (size_t(ts.M) * ts.K + size_t(ts.N) * ts.K) * 2;
        const int nsets = int(std::max<size_t>(2, (3 * size_t(prop.l2CacheSize) + set_bytes - 1) / set_bytes));
        std::vector<void*> sa(nsets), sb(nsets);
        for (int i = 0; i < nsets; ++i) {
          CUDA_CHECK(cudaMalloc(&sa[i], size_t(ts.M) * ts.K * 2));
          CUDA_CHECK(cudaMalloc(&sb[i], size_t(ts.N) * ts.K * 2));
          fill(sa[i], tin, size_t(ts.M) * ts.K, 300 + 2 * i);
          fill(sb[i], tin, size_t(ts.N) * ts.K, 301 + 2 * i);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        // Large-shape check of every timed config against cuBLAS (fp32 output) on two input sets,
        // each config run on each set after poisoning C; a failing config is not timed.
        {
          const size_t mn = size_t(ts.M) * ts.N;
          float *cref, *outf;
          double* acc;
          unsigned long long* nans;
          CUDA_CHECK(cudaMalloc(&cref, mn * 4));
          CUDA_CHECK(cudaMalloc(&outf, mn * 4));
          CUDA_CHECK(cudaMalloc(&acc, 2 * sizeof(double)));
          CUDA_CHECK(cudaMalloc(&nans, sizeof(unsigned long long)));
          std::vector<double> worst(todo.size(), 0.0);
          std::vector<bool> bad(todo.size(), false);
          for (int set = 0; set < 2; ++set) {
            cublas_gemm_rc(h, ts.M, ts.N, ts.K, sa[set % nsets], sb[set % nsets], tin, cref, DType::fp32, 1.0f, 0.0f, 0);
            for (size_t j = 0; j < todo.size(); ++j) {
              CUDA_CHECK(cudaMemset(cbuf, 0xFF, mn * 2));
              CUDA_CHECK(todo[j]->launch(sa[set % nsets], sb[set % nsets], cbuf, ts.M, ts.N, ts.K, 1.0f, 0.0f, 0));
              convert_to_float(cbuf, tin, outf, mn);
              CUDA_CHECK(cudaMemset(acc, 0, 2 * sizeof(double)));
              CUDA_CHECK(cudaMemset(nans, 0, sizeof(unsigned long long)));
              diff_kernel<<<1024, 256>>>(outf, cref, mn, acc, nans);
              CUDA_CHECK(cudaGetLastError());
              double hacc[2];
              unsigned long long hn = 0;
              CUDA_CHECK(cudaMemcpy(hacc, acc, sizeof hacc, cudaMemcpyDeviceToHost));
              CUDA_CHECK(cudaMemcpy(&hn, nans, sizeof hn, cudaMemcpyDeviceToHost));
              const double err = std::sqrt(hacc[0] / std::max(hacc[1], 1e-30));
              const double tol = tin == DType::bf16 ? 2e-2 : 1e-2;
              worst[j] = std::max(worst[j], err);
              if (hn || !(err <= tol)) {
                bad[j] = true;
                std::printf("  FAIL (large) %-50s %dx%dx%d set %d: rel L2 vs cuBLAS %.3e, %llu NaN\n",
                            todo[j]->name.c_str(), ts.M, ts.N, ts.K, set, err, hn);
              }
            }
          }
          std::vector<const Config*> kept;
          for (size_t j = 0; j < todo.size(); ++j) {
            if (bad[j]) {
              ++g_failures;
              continue;
            }
            kept.push_back(todo[j]);
          }
          std::printf("  [%dx%dx%d %s: large-shape check vs cuBLAS, 2 input sets: %zu of %zu ok, worst rel L2 %.2e]\n",
                      ts.M, ts.N, ts.K, dtype_name(tin), kept.size(), todo.size(),
                      worst.empty() ? 0.0 : *std::max_element(worst.begin(), worst.end()));
          todo = kept;
          CUDA_CHECK(cudaFree(cref));
          CUDA_CHECK(cudaFree(outf));
          CUDA_CHECK(cudaFree(acc));
          CUDA_CHECK(cudaFree(nans));
        }
        const double flops = 2.0 * ts.M * ts.N * ts.K;
        const int entries = int(todo.size()) + 1, rounds = 5, per_round = (runs + rounds - 1) / rounds;
        std::vector<std::vector<float>> samples(entries);
        for (int round = 0; round < rounds; ++round)
          for (int e = 0; e < entries; ++e) {
            const int j = (e + round * entries / rounds) % entries;  // 0 = cuBLAS
            if (j == 0)
              time_samples([&](int i, cudaStream_t s) {
                cublas_gemm_rc(h, ts.M, ts.N, ts.K, sa[i], sb[i], tin, cbuf, tin, 1.0f, 0.0f, s);
              }, 2, per_round, nsets, samples[0]);
            else
              time_samples([&](int i, cudaStream_t s) {
                CUDA_CHECK(todo[j - 1]->launch(sa[i], sb[i], cbuf, ts.M, ts.N, ts.K, 1.0f, 0.0f, s));
              }, 2, per_round, nsets, samples[j]);
          }
        char shape[64];
        std::snprintf(shape, sizeof shape, "%dx%dx%d %s", ts.M, ts.N, ts.K, dtype_name(tin));
        std::printf("  [%s: SM clock, power after the group: %s]\n", shape, sm_clock().c_str());
        const double cub_us = median(samples[0]) * 1000.0;
        std::printf("  %-22s %-50s %9.1f us %7.1f TF/s\n", shape, "cuBLAS", cub_us, flops / cub_us * 1e-6);
        for (size_t j = 0; j < todo.size(); ++j) {
          const double us = median(samples[j + 1]) * 1000.0;
          std::vector<float> v = samples[j + 1];
          std::sort(v.begin(), v.end());
          std::printf("  %-22s %-50s %9.1f us %7.1f TF/s  %.2fx cuBLAS  (min %.1f max %.1f us)\n", shape,
                      todo[j]->name.c_str(), us, flops / us * 1e-6, cub_us / us, v.front() * 1000.0,
                      v.back() * 1000.0);
          rows.push_back({shape, todo[j]->name, us, flops / us * 1e-6, flops / cub_us * 1e-6});
        }
        for (int i = 0; i < nsets; ++i) {
          CUDA_CHECK(cudaFree(sa[i]));
          CUDA_CHECK(cudaFree(sb[i]));
        }
      }
    }
    CUDA_CHECK(cudaFree(cbuf));
    std::printf("\n== summary: best sm90 config per shape, the mma.sync pick, cuBLAS (TF/s) ==\n");
    std::vector<std::string> seen;
    for (const auto& r : rows) {
      if (std::find(seen.begin(), seen.end(), r.shape) != seen.end()) continue;
      seen.push_back(r.shape);
      const Row* best = nullptr;
      const Row* mma = nullptr;
      for (const auto& q : rows) {
        if (q.shape != r.shape) continue;
        if (q.name.rfind("sm90", 0) == 0 && (!best || q.tf > best->tf)) best = &q;
        if (q.name.rfind("mma.sync", 0) == 0) mma = &q;
      }
      std::printf("%-22s best %-44s %7.1f | mma.sync %7.1f | cuBLAS %7.1f | %.2fx cuBLAS\n", r.shape.c_str(),
                  best ? best->name.c_str() : "-", best ? best->tf : 0.0, mma ? mma->tf : 0.0, r.cublas_tf,
                  best ? best->tf / r.cublas_tf : 0.0);
    }
  }
  std::printf("\ncorrectness failures: %d\n", g_failures);
  CUBLAS_CHECK(cublasDestroy(h));
  return g_failures ? 1 : 0;
}
