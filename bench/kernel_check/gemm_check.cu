// gemm_check.cu — standalone GPU check of the built-in gemm template (templates/gemm/gemm.cuh):
// correctness against cuBLAS at awkward shapes, then timing against cuBLAS on the shapes that
// matter (8192^3, 4096^3, decode 64x14336x4096 and 16x4096x4096). Compiled directly by nvcc
// (not through ktune/NVRTC), so it needs nothing but the CUDA toolkit:
//
//   nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I templates/common \
//        bench/kernel_check/gemm_check.cu -lcublas -o gemm_check && ./gemm_check
//
// Options: --quick (fewer timed shapes), --no-timing, --runs N (timed runs per point, default 40),
//          --filter S (only configs whose name contains S), --no-check (timing only),
//          --profile S M N K (run only the configs matching S at M x N x K, 3 launches, for ncu).
// Exit status is non-zero if any correctness check fails. See README.md beside this file.
//
// Configs are of three kinds (the name's first word): "new" = ktune_gemm as ktune compiles it;
// "var" = the same kernel body with other internal choices (L2 prefetch hint, epilogue, fragment
// pipelining; see gemm_body in gemm.cuh); "v0" = the kernel as first run on the H200
// (gemm_v0.cuh), for same-run A/B comparisons.
#include "../../templates/gemm/gemm.cuh"
namespace gemm_v0 {
#include "gemm_v0.cuh"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CUDA_CHECK(x)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,               \
                   cudaGetErrorString(e_));                                                \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)
#define CUBLAS_CHECK(x)                                                                    \
  do {                                                                                     \
    cublasStatus_t s_ = (x);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
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

enum class Kind { large, decode, other };

using LaunchFn = cudaError_t (*)(const void* A, const void* B, void* C, float* ws, int* counters,
                                 int M, int N, int K, float alpha, float beta, cudaStream_t s);

struct Config {
  std::string name;
  Kind kind;
  DType tin, tout;
  int a_row, b_row, bm, bn, bk, wm, wn, stages, group_m, swizzle, split_k;
  int threads, smem;
  LaunchFn launch;
  int for_m;  // timed only on problems with this M (0: any M the manifest's tile rule allows)
};

// The kernel body with non-default internal choices (bench only).
template <typename TI, typename TO, int AR, int BR, int BM, int BN, int BK, int WM, int WN, int ST,
          int GM, int SW, int SK, int L2, bool EPI, int FM>
__global__ void __launch_bounds__(WM * WN * 32, 1)
    gemm_variant(const TI* __restrict__ A, const TI* __restrict__ B, TO* __restrict__ C,
                 float* __restrict__ ws, int* __restrict__ cnt, int M, int N, int K, float alpha, float beta) {
  ktune_gemm_detail::gemm_body<TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, L2, EPI, FM>(
      A, B, C, ws, cnt, M, N, K, alpha, beta);
}

// VER 0: ktune_gemm; 1: gemm_v0::ktune_gemm; 2: gemm_variant<..., L2, EPI, FM>.
template <int VER, typename TI, typename TO, int AR, int BR, int BM, int BN, int BK, int WM, int WN,
          int ST, int GM, int SW, int SK, int L2, bool EPI, int FM>
cudaError_t launch_gemm(const void* A, const void* B, void* C, float* ws, int* counters, int M,
                        int N, int K, float alpha, float beta, cudaStream_t s) {
  using Cfg = ktune_gemm_detail::GemmConfig<AR, BR, BM, BN, BK, WM, WN, ST, SW>;
  using KernelFn = void (*)(const TI*, const TI*, TO*, float*, int*, int, int, int, float, float);
  KernelFn kernel;
  if constexpr (VER == 0) kernel = ktune_gemm<TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK>;
  else if constexpr (VER == 1) kernel = gemm_v0::ktune_gemm<TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK>;
  else kernel = gemm_variant<TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, L2, EPI, FM>;
  static bool attr_done = false;
  if (!attr_done) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    if (e != cudaSuccess) return e;
    attr_done = true;
  }
  const dim3 grid(static_cast<unsigned>(((M + BM - 1) / BM) * ((N + BN - 1) / BN)), 1, SK);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, s>>>(
      static_cast<const TI*>(A), static_cast<const TI*>(B), static_cast<TO*>(C), ws, counters, M, N, K,
      alpha, beta);
  return cudaGetLastError();
}

std::string cfg_name(const char* ver, const char* extra, int ar, int br, DType ti, DType to, int bm, int bn,
                     int bk, int wm, int wn, int st, int gm, int sw, int sk) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %c%c %s->%s %dx%dx%d w%dx%d s%d g%d %s sk%d%s%s", ver, ar ? 'r' : 'c',
                br ? 'r' : 'c', dtype_name(ti), dtype_name(to), bm, bn, bk, wm, wn, st, gm, sw ? "xor" : "pad", sk,
                *extra ? " " : "", extra);
  return buf;
}

#define CFGX(VER, VNAME, EXTRA, FORM, KIND, TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, L2, EPI, FM) \
  Config {                                                                                                \
    cfg_name(VNAME, EXTRA, AR, BR, dtype_of<TI>(), dtype_of<TO>(), BM, BN, BK, WM, WN, ST, GM, SW, SK),     \
        KIND, dtype_of<TI>(), dtype_of<TO>(), AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, WM * WN * 32,     \
        ktune_gemm_detail::GemmConfig<AR, BR, BM, BN, BK, WM, WN, ST, SW>::kSmemBytes,                    \
        &launch_gemm<VER, TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, L2, EPI, FM>, FORM         \
  }
// The shipped kernel, the v0 kernel, and variants (L2 hint, staged epilogue, fragment mode).
#define CFG(KIND, ...) CFGX(0, "new", "", 0, KIND, __VA_ARGS__, 0, false, 0)
#define CFGM(FORM, KIND, ...) CFGX(0, "new", "", FORM, KIND, __VA_ARGS__, 0, false, 0)
#define V0(FORM, KIND, ...) CFGX(1, "v0", "", FORM, KIND, __VA_ARGS__, 0, false, 0)
#define VAR(EXTRA, FORM, KIND, TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, L2, EPI, FM) \
  CFGX(2, "var", EXTRA, FORM, KIND, TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK, L2, EPI, FM)

std::vector<Config> make_configs() {
  using bf = ktune_bf16;
  using hf = ktune_fp16;
  const Kind L = Kind::large, D = Kind::decode, O = Kind::other;
  return {
      // v0 = the kernel as first run on the H200, in the configs that were best there.
      // ---- large shapes (timed on 8192^3 and 4096^3 in their own layout) ----
      V0(0, L, bf, bf, 1, 0, 256, 128, 32, 4, 2, 4, 8, 1, 1),
      V0(0, L, bf, bf, 1, 1, 128, 256, 64, 2, 4, 3, 8, 1, 1),
      CFG(L, bf, bf, 1, 0, 256, 128, 128, 4, 2, 2, 8, 1, 1),   // heuristic pick (large)
      VAR("direct-epi", 0, L, bf, bf, 1, 0, 256, 128, 128, 4, 2, 2, 8, 1, 1, 128, false, 0),
      CFG(L, bf, bf, 1, 0, 128, 256, 128, 2, 4, 2, 8, 1, 1),
      CFG(L, bf, bf, 1, 0, 128, 256, 64, 2, 4, 3, 8, 1, 1),    // heuristic fallback (sm_80)
      CFG(L, bf, bf, 1, 0, 256, 128, 64, 4, 2, 3, 16, 1, 1),
      CFG(L, bf, bf, 1, 0, 256, 128, 128, 4, 2, 2, 16, 1, 1),
      CFG(L, bf, bf, 1, 0, 128, 128, 64, 2, 2, 3, 8, 1, 1),
      CFG(L, bf, bf, 1, 1, 256, 128, 128, 4, 2, 2, 8, 1, 1),
      VAR("direct-epi", 0, L, bf, bf, 1, 1, 256, 128, 128, 4, 2, 2, 8, 1, 1, 128, false, 0),
      CFG(L, bf, bf, 1, 1, 128, 256, 128, 2, 4, 2, 8, 1, 1),
      CFG(L, bf, bf, 1, 1, 128, 256, 64, 2, 4, 3, 8, 1, 1),
      CFG(L, bf, bf, 1, 1, 256, 128, 64, 4, 2, 3, 16, 1, 1),
      CFG(L, hf, hf, 1, 0, 256, 128, 128, 4, 2, 2, 8, 1, 1),
      CFG(L, hf, hf, 1, 0, 128, 256, 64, 2, 4, 3, 8, 1, 1),
      // ---- decode M=64 (timed on 64x14336x4096) ----
      V0(64, D, bf, bf, 1, 0, 64, 64, 64, 1, 4, 4, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 0, 64, 128, 128, 1, 4, 4, 1, 1, 1),  // heuristic pick
      CFGM(64, D, bf, bf, 1, 0, 64, 64, 128, 2, 2, 3, 1, 1, 1),   // heuristic fallback (sm_80)
      CFGM(64, D, bf, bf, 1, 0, 64, 64, 64, 2, 2, 6, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 0, 64, 128, 128, 2, 2, 4, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 0, 64, 128, 128, 1, 4, 3, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 0, 64, 128, 64, 1, 4, 6, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 1, 64, 128, 128, 1, 4, 4, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 1, 64, 64, 64, 2, 2, 6, 1, 1, 1),
      CFGM(64, D, bf, bf, 1, 1, 64, 64, 128, 2, 2, 3, 1, 1, 1),
      // ---- decode M=16 (timed on 16x4096x4096) ----
      V0(16, D, bf, bf, 1, 0, 16, 128, 128, 1, 4, 4, 1, 1, 2),
      CFGM(16, D, bf, bf, 1, 0, 16, 64, 128, 1, 4, 6, 1, 1, 2),  // heuristic pick
      CFGM(16, D, bf, bf, 1, 0, 16, 32, 128, 1, 2, 6, 1, 1, 2),
      CFGM(16, D, bf, bf, 1, 0, 16, 64, 64, 1, 4, 6, 1, 1, 2),
      CFGM(16, D, bf, bf, 1, 0, 16, 64, 128, 1, 4, 4, 1, 1, 2),
      CFGM(16, D, bf, bf, 1, 0, 16, 32, 128, 1, 2, 6, 1, 1, 1),
      V0(16, D, bf, bf, 1, 1, 16, 128, 64, 1, 4, 4, 1, 1, 4),
      CFGM(16, D, bf, bf, 1, 1, 16, 64, 128, 1, 4, 6, 1, 1, 2),
      CFGM(16, D, bf, bf, 1, 1, 16, 32, 128, 1, 2, 6, 1, 1, 2),
      // ---- other layouts, dtypes, output types and the remaining heuristic rules (correctness) ----
      CFG(O, bf, bf, 1, 0, 32, 64, 128, 1, 4, 5, 1, 1, 2),
      CFG(O, bf, bf, 1, 0, 64, 64, 128, 2, 2, 3, 1, 1, 2),
      CFG(O, bf, bf, 1, 1, 16, 64, 64, 1, 4, 4, 1, 1, 1),
      CFG(O, bf, bf, 1, 0, 64, 64, 64, 2, 2, 4, 1, 1, 1),
      CFG(O, bf, bf, 0, 1, 128, 128, 32, 2, 2, 3, 8, 1, 1),
      CFG(O, bf, bf, 0, 0, 128, 128, 32, 2, 2, 3, 8, 0, 2),
      CFG(O, bf, bf, 0, 1, 256, 128, 128, 4, 2, 2, 8, 1, 1),
      CFG(O, hf, float, 0, 0, 64, 64, 32, 2, 2, 3, 1, 1, 8),
      CFG(O, bf, float, 1, 1, 128, 128, 32, 2, 2, 4, 8, 1, 1),
      CFG(O, bf, hf, 0, 1, 16, 32, 32, 1, 1, 2, 1, 1, 1),
      V0(0, O, bf, hf, 0, 1, 16, 32, 32, 1, 1, 2, 1, 1, 1),
      CFG(O, hf, float, 1, 0, 32, 64, 64, 1, 2, 3, 1, 1, 4),
      CFG(O, bf, bf, 1, 0, 32, 32, 32, 1, 1, 6, 1, 0, 1),
      VAR("direct-epi", 0, O, bf, float, 0, 0, 64, 64, 32, 2, 2, 3, 1, 1, 8, 128, false, 0),
      VAR("direct-epi", 0, O, bf, bf, 1, 1, 16, 32, 32, 1, 1, 2, 1, 0, 1, 128, false, 0),
      VAR("b-halves", 0, O, bf, bf, 1, 0, 128, 128, 32, 2, 2, 3, 8, 1, 2, 128, true, 2),
  };
}

// ---- device helpers ------------------------------------------------------------------------------
__device__ __forceinline__ float hash_uniform(unsigned long long i, unsigned seed) {
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
template <typename T>
__global__ void to_float_kernel(const T* p, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = ktune_dev::to_float(p[i]);
}

// Plain reference: one thread per output, fp64 accumulation over k in [0, k_end), our layouts.
template <typename T>
__global__ void naive_gemm(const T* A, const T* B, float* C, int M, int N, int K, int k_end, int a_row,
                           int b_row, float alpha, float beta) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  double s = 0;
  for (int k = 0; k < k_end; ++k) {
    const double a = ktune_dev::to_float(a_row ? A[size_t(m) * K + k] : A[size_t(k) * M + m]);
    const double b = ktune_dev::to_float(b_row ? B[size_t(k) * N + n] : B[size_t(n) * K + k]);
    s += a * b;
  }
  float* c = C + size_t(m) * N + n;
  *c = float(alpha * s + (beta != 0.0f ? double(beta) * *c : 0.0));
}
void naive_ref(DType tin, int a_row, int b_row, int M, int N, int K, int k_end, const void* A, const void* B,
               float* C, float beta) {
  const dim3 grid((N + 127) / 128, M);
  if (tin == DType::bf16)
    naive_gemm<<<grid, 128>>>(static_cast<const ktune_bf16*>(A), static_cast<const ktune_bf16*>(B), C, M, N, K, k_end,
                              a_row, b_row, 1.0f, beta);
  else
    naive_gemm<<<grid, 128>>>(static_cast<const ktune_fp16*>(A), static_cast<const ktune_fp16*>(B), C, M, N, K, k_end,
                              a_row, b_row, 1.0f, beta);
  CUDA_CHECK(cudaGetLastError());
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

// Row-major C (M x N) = op(A) * op(B) with our layouts, as cuBLAS column-major: C^T = B^T A^T.
void cublas_gemm(cublasHandle_t h, int a_row, int b_row, int M, int N, int K, const void* A,
                 const void* B, DType tin, void* C, DType tout, float alpha, float beta, cudaStream_t s) {
  CUBLAS_CHECK(cublasSetStream(h, s));
  const cublasOperation_t ta = b_row ? CUBLAS_OP_N : CUBLAS_OP_T;  // "A" of cuBLAS is our B
  const cublasOperation_t tb = a_row ? CUBLAS_OP_N : CUBLAS_OP_T;  // "B" of cuBLAS is our A
  const int lda = b_row ? N : K;
  const int ldb = a_row ? K : M;
  CUBLAS_CHECK(cublasGemmEx(h, ta, tb, N, M, K, &alpha, B, cuda_type(tin), lda, A, cuda_type(tin), ldb,
                            &beta, C, cuda_type(tout), N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

struct DeviceBuffers {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* c0 = nullptr;       // initial C for the beta != 0 check
  float* ref = nullptr;     // reference: plain fp64-accumulating kernel (naive_gemm), fp32
  float* cub = nullptr;     // cuBLAS result, fp32 (cross-check of the reference)
  float* outf = nullptr;    // our result converted to fp32
  float* ws = nullptr;
  int* counters = nullptr;
  size_t ws_floats = size_t(64) << 20;   // 256 MiB of split-K partials
  size_t n_counters = size_t(1) << 20;
};

int g_failures = 0;

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

std::vector<float> to_host(const float* p, size_t n) {
  std::vector<float> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

int g_cublas_disagree = 0;

// Poisons C, runs the config (twice for split-K: the second launch needs counters left at zero),
// compares against the plain fp64-accumulating reference kernel; cuBLAS (fp32 compute and output)
// is computed too and must agree with that reference to 1e-4, else it is reported (a reference
// problem, not a kernel one).
bool check_one(const Config& c, cublasHandle_t h, DeviceBuffers& d, int M, int N, int K, float beta,
               unsigned seed) {
  const size_t mk = size_t(M) * K, kn = size_t(K) * N, mn = size_t(M) * N;
  fill(d.a, c.tin, mk, seed);
  fill(d.b, c.tin, kn, seed + 1);
  if (beta != 0.0f) fill(d.c0, c.tout, mn, seed + 2);
  // References: fp32 C = alpha*A*B + beta*float(C0).
  if (beta != 0.0f) {
    convert_to_float(d.c0, c.tout, d.ref, mn);
    convert_to_float(d.c0, c.tout, d.cub, mn);
  }
  naive_ref(c.tin, c.a_row, c.b_row, M, N, K, K, d.a, d.b, d.ref, beta);
  cublas_gemm(h, c.a_row, c.b_row, M, N, K, d.a, d.b, c.tin, d.cub, DType::fp32, 1.0f, beta, 0);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> ref = to_host(d.ref, mn);
  const double cublas_err = rel_l2(to_host(d.cub, mn), ref, nullptr);
  if (!(cublas_err <= 1e-4)) {
    ++g_cublas_disagree;
    // Which term does cuBLAS lack? Compare it with the reference over k < K-1.
    naive_ref(c.tin, c.a_row, c.b_row, M, N, K, K - 1, d.a, d.b, d.outf, beta);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double err_km1 = rel_l2(to_host(d.cub, mn), to_host(d.outf, mn), nullptr);
    std::printf("  NOTE cuBLAS disagrees with the fp64 reference: M=%d N=%d K=%d %s%s: rel L2 %.3e "
                "(vs the reference over k < K-1: %.3e)\n",
                M, N, K, c.a_row ? "r" : "c", c.b_row ? "r" : "c", cublas_err, err_km1);
  }
  if (c.split_k > 1 && size_t(c.split_k) * mn > d.ws_floats) {
    std::printf("  SKIP %-60s M=%d N=%d K=%d (workspace too small)\n", c.name.c_str(), M, N, K);
    return true;
  }
  const size_t tiles = size_t((M + c.bm - 1) / c.bm) * ((N + c.bn - 1) / c.bn);
  bool ok = true;
  double worst_err = 0;
  for (int rep = 0; rep < (c.split_k > 1 ? 2 : 1); ++rep) {
    if (beta != 0.0f) CUDA_CHECK(cudaMemcpy(d.c, d.c0, mn * dtype_bytes(c.tout), cudaMemcpyDeviceToDevice));
    else CUDA_CHECK(cudaMemset(d.c, 0xFF, mn * dtype_bytes(c.tout)));  // NaN in bf16, fp16 and fp32
    CUDA_CHECK(c.launch(d.a, d.b, d.c, d.ws, d.counters, M, N, K, 1.0f, beta, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    convert_to_float(d.c, c.tout, d.outf, mn);
    size_t nans = 0;
    const double err = rel_l2(to_host(d.outf, mn), ref, &nans);
    worst_err = std::max(worst_err, err);
    const double tol = c.tout == DType::bf16 ? 2e-2 : c.tout == DType::fp16 ? 1e-2 : 5e-3;
    if (nans || !(err <= tol)) {
      ok = false;
      std::printf("  FAIL %-60s M=%d N=%d K=%d beta=%g run %d: rel L2 err %.3e (tol %.0e), %zu NaN\n",
                  c.name.c_str(), M, N, K, beta, rep, err, tol, nans);
    }
    if (c.split_k > 1) {
      std::vector<int> cnt(tiles);
      CUDA_CHECK(cudaMemcpy(cnt.data(), d.counters, tiles * sizeof(int), cudaMemcpyDeviceToHost));
      const size_t nonzero = size_t(std::count_if(cnt.begin(), cnt.end(), [](int v) { return v != 0; }));
      if (nonzero) {
        ok = false;
        std::printf("  FAIL %-60s M=%d N=%d K=%d: %zu tile counters left non-zero\n", c.name.c_str(), M, N, K, nonzero);
        CUDA_CHECK(cudaMemset(d.counters, 0, d.n_counters * sizeof(int)));
      }
    }
  }
  if (ok)
    std::printf("  ok   %-60s M=%5d N=%5d K=%5d beta=%-3g rel L2 err %.2e (cuBLAS %.1e)\n", c.name.c_str(), M, N,
                K, beta, worst_err, cublas_err);
  else
    ++g_failures;
  return ok;
}

// Rounds the problem to what the layout allows (contiguous dimension of A and B a multiple of 8).
void align_shape(const Config& c, int& M, int& N, int& K) {
  auto up8 = [](int v) { return (v + 7) / 8 * 8; };
  if (!c.a_row) M = up8(M);
  if (c.b_row) N = up8(N);
  if (c.a_row || !c.b_row) K = up8(K);
}

bool fits_manifest_tile_rule(const Config& c, int M) { return c.bm <= std::max(16, 2 * M - 1); }

// ---- timing --------------------------------------------------------------------------------------
struct TimedPoint {
  std::string config, shape, layout;
  double ours_us, ours_tflops, cublas_us, cublas_tflops, bytes;
};

// Current SM clock as nvidia-smi reports it ("?" when it cannot be run).
std::string sm_clock() {
  FILE* f = popen("nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits 2>/dev/null", "r");
  if (!f) return "?";
  char buf[64] = {0};
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

// Input sets rotate so that the timed kernels read A and B from HBM rather than a warm L2.
struct InputSets {
  std::vector<void*> a, b;
  int M = 0, N = 0, K = 0;
  DType t = DType::bf16;
  void release() {
    for (void* p : a) CUDA_CHECK(cudaFree(p));
    for (void* p : b) CUDA_CHECK(cudaFree(p));
    a.clear();
    b.clear();
  }
  void make(int m, int n, int k, DType type, size_t l2_bytes) {
    if (m == M && n == N && k == K && type == t && !a.empty()) return;
    release();
    M = m, N = n, K = k, t = type;
    const size_t set_bytes = (size_t(m) * k + size_t(k) * n) * dtype_bytes(type);
    const int sets = int(std::max<size_t>(2, (3 * l2_bytes + set_bytes - 1) / set_bytes));
    for (int i = 0; i < sets; ++i) {
      void *pa, *pb;
      CUDA_CHECK(cudaMalloc(&pa, size_t(m) * k * dtype_bytes(type)));
      CUDA_CHECK(cudaMalloc(&pb, size_t(k) * n * dtype_bytes(type)));
      fill(pa, type, size_t(m) * k, 100 + 2 * i);
      fill(pb, type, size_t(k) * n, 101 + 2 * i);
      a.push_back(pa);
      b.push_back(pb);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// Appends `runs` per-launch times (ms) to `out`.
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
  bool quick = false, timing = true, check = true;
  int runs = 40;
  std::string filter;
  int prof_m = 0, prof_n = 0, prof_k = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    else if (!std::strcmp(argv[i], "--no-check")) check = false;
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::max(20, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
    else if (!std::strcmp(argv[i], "--profile") && i + 4 < argc) {
      filter = argv[++i];
      prof_m = std::atoi(argv[++i]);
      prof_n = std::atoi(argv[++i]);
      prof_k = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--no-timing] [--no-check] [--runs N] [--filter S] [--profile S M N K]\n", argv[0]);
      return 2;
    }
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MiB, smem opt-in %zu B\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin);

  std::vector<Config> configs;
  for (auto& c : make_configs())
    if (filter.empty() || c.name.find(filter) != std::string::npos) configs.push_back(c);

  if (prof_m) {  // a few launches of the matching configs on one problem, for ncu
    const size_t mk = size_t(prof_m) * prof_k, kn = size_t(prof_k) * prof_n, mn = size_t(prof_m) * prof_n;
    void *a, *b, *c;
    float* ws;
    int* cnt;
    CUDA_CHECK(cudaMalloc(&a, mk * 2));
    CUDA_CHECK(cudaMalloc(&b, kn * 2));
    CUDA_CHECK(cudaMalloc(&c, mn * 4));
    CUDA_CHECK(cudaMalloc(&ws, mn * 4 * 8));
    CUDA_CHECK(cudaMalloc(&cnt, (size_t(1) << 20) * sizeof(int)));
    CUDA_CHECK(cudaMemset(cnt, 0, (size_t(1) << 20) * sizeof(int)));
    for (const auto& cf : configs) {
      fill(a, cf.tin, mk, 5);
      fill(b, cf.tin, kn, 6);
      for (int r = 0; r < 3; ++r)
        CUDA_CHECK(cf.launch(a, b, c, ws, cnt, prof_m, prof_n, prof_k, 1.0f, 0.0f, 0));
      CUDA_CHECK(cudaDeviceSynchronize());
      std::printf("profiled %s at %dx%dx%d\n", cf.name.c_str(), prof_m, prof_n, prof_k);
    }
    return 0;
  }
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));

  // ---- correctness ----
  DeviceBuffers d;
  const size_t max_elems = size_t(1100) * 1100 + size_t(16) * 4104 * 8;
  const size_t max_in = size_t(4104) * 4104 + size_t(1100) * 1100;
  CUDA_CHECK(cudaMalloc(&d.a, max_in * 2));
  CUDA_CHECK(cudaMalloc(&d.b, max_in * 2));
  CUDA_CHECK(cudaMalloc(&d.c, max_elems * 4));
  CUDA_CHECK(cudaMalloc(&d.c0, max_elems * 4));
  CUDA_CHECK(cudaMalloc(&d.ref, max_elems * 4));
  CUDA_CHECK(cudaMalloc(&d.cub, max_elems * 4));
  CUDA_CHECK(cudaMalloc(&d.outf, max_elems * 4));
  CUDA_CHECK(cudaMalloc(&d.ws, d.ws_floats * 4));
  CUDA_CHECK(cudaMalloc(&d.counters, d.n_counters * sizeof(int)));
  CUDA_CHECK(cudaMemset(d.counters, 0, d.n_counters * sizeof(int)));

  std::printf("\n== correctness vs cuBLAS (fp32 reference; C poisoned with NaN when beta = 0) ==\n");
  std::vector<const Config*> runnable;
  for (const auto& c : configs) {
    if (size_t(c.smem) > prop.sharedMemPerBlockOptin) {
      std::printf("  SKIP %-60s needs %d B of shared memory\n", c.name.c_str(), c.smem);
      continue;
    }
    runnable.push_back(&c);
    if (!check) continue;
    struct Shape { int M, N, K; float beta; };
    const Shape shapes[] = {{77, 137, 200, 0.f}, {77, 137, 200, 0.5f}, {1000, 1000, 1032, 0.f},
                            {13, 4100, 4096, 0.f}, {64, 1000, 520, 0.f}, {1, 1, 8, 0.f}};
    unsigned seed = 1;
    for (const auto& s : shapes) {
      int M = s.M, N = s.N, K = s.K;
      if (!c.a_row && c.b_row) K += 1;  // "cr" has no constraint on K: exercise a K tail
      align_shape(c, M, N, K);
      check_one(c, h, d, M, N, K, s.beta, seed += 7);
    }
  }
  std::printf("correctness: %d failure(s); cuBLAS disagreed with the fp64 reference %d time(s)\n", g_failures,
              g_cublas_disagree);

  if (!timing) {
    CUBLAS_CHECK(cublasDestroy(h));
    return g_failures ? 1 : 0;
  }

  // ---- timing ----
  struct TShape { int M, N, K; Kind kind; };
  std::vector<TShape> tshapes = {{8192, 8192, 8192, Kind::large}, {4096, 4096, 4096, Kind::large},
                                 {64, 14336, 4096, Kind::decode}, {16, 4096, 4096, Kind::decode}};
  if (quick) tshapes = {{8192, 8192, 8192, Kind::large}, {16, 4096, 4096, Kind::decode}};
  std::vector<TimedPoint> points;
  InputSets sets;
  void* cbuf = nullptr;
  CUDA_CHECK(cudaMalloc(&cbuf, size_t(8192) * 8192 * 4));
  std::printf("\n== timing (median of %d runs after warm-up, inputs rotated over sets > 3x L2) ==\n", runs);
  for (const auto& ts : tshapes) {
    for (DType tin : {DType::bf16, DType::fp16}) {
      for (int b_row : {0, 1}) {
        std::vector<const Config*> todo;
        for (const Config* c : runnable)
          if (c->kind == ts.kind && c->tin == tin && c->b_row == b_row && c->a_row == 1 &&
              fits_manifest_tile_rule(*c, ts.M) && (c->for_m == 0 || c->for_m == ts.M) && (c->split_k == 1 || size_t(c->split_k) * ts.M * ts.N <= d.ws_floats))
            todo.push_back(c);
        if (todo.empty()) continue;
        sets.make(ts.M, ts.N, ts.K, tin, size_t(prop.l2CacheSize));
        const int nsets = int(sets.a.size());
        const double flops = 2.0 * ts.M * ts.N * ts.K;
        const double bytes = (double(ts.M) * ts.K + double(ts.K) * ts.N + double(ts.M) * ts.N) * 2;
        const std::string layout = b_row ? "rr" : "rc";
        char shape[64];
        std::snprintf(shape, sizeof shape, "%dx%dx%d", ts.M, ts.N, ts.K);
        const DType tout = tin;
        // Interleaved rounds: cuBLAS and every config, 5 times over, the order rotated each round
        // (a kernel timed right after cuBLAS runs at a lower clock: first measured here, 4% between
        // two kernels of identical SASS), so that clock drift under tensor load hits all alike; the
        // median is over every round's samples.
        std::vector<std::vector<float>> samples(todo.size() + 1);
        const int rounds = 5, per_round = (runs + rounds - 1) / rounds;
        const int entries = int(todo.size()) + 1;
        for (int round = 0; round < rounds; ++round) {
          for (int e = 0; e < entries; ++e) {
            const int j = (e + round * entries / rounds) % entries;  // 0 = cuBLAS
            if (j == 0) {
              time_samples(
                  [&](int i, cudaStream_t s) {
                    cublas_gemm(h, 1, b_row, ts.M, ts.N, ts.K, sets.a[i], sets.b[i], tin, cbuf, tout, 1.0f, 0.0f, s);
                  },
                  3, per_round, nsets, samples[0]);
            } else {
              const Config* c = todo[j - 1];
              time_samples(
                  [&](int i, cudaStream_t s) {
                    CUDA_CHECK(c->launch(sets.a[i], sets.b[i], cbuf, d.ws, d.counters, ts.M, ts.N, ts.K, 1.0f, 0.0f, s));
                  },
                  3, per_round, nsets, samples[j]);
            }
          }
        }
        std::printf("  [%s %s %s: SM clock after the group: %s MHz]\n", shape, b_row ? "rr" : "rc", dtype_name(tin),
                    sm_clock().c_str());
        const double cublas_us = median(samples[0]) * 1000.0;
        for (size_t j = 0; j < todo.size(); ++j) {
          const Config* c = todo[j];
          const double us = median(samples[j + 1]) * 1000.0;
          TimedPoint p{c->name, shape, layout, us, flops / us * 1e-6, cublas_us, flops / cublas_us * 1e-6, bytes};
          std::printf("  %-16s %-3s %-62s %9.1f us %7.1f TF/s %6.2f TB/s | cuBLAS %9.1f us %7.1f TF/s | %.2fx\n",
                      shape, layout.c_str(), c->name.c_str(), us, p.ours_tflops, bytes / us * 1e-6, cublas_us,
                      p.cublas_tflops, cublas_us / us);
          points.push_back(p);
        }
      }
    }
  }
  sets.release();
  CUDA_CHECK(cudaFree(cbuf));

  std::printf("\n== summary: best config per shape/layout, v0 (as first run) and current (new/var) ==\n");
  std::printf("%-16s %-3s %-62s %9s %9s %9s %7s\n", "shape", "lay", "best config", "TF/s", "TB/s", "cuBLAS", "ratio");
  auto key_of = [](const TimedPoint& p) {
    return p.shape + p.layout + (p.config.find("fp16->") != std::string::npos ? "h" : "b") +
           (p.config.rfind("v0 ", 0) == 0 ? "0" : "1");
  };
  std::vector<std::string> seen;
  for (const auto& p : points) {
    const std::string key = key_of(p);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    const TimedPoint* best = &p;
    for (const auto& q : points)
      if (key_of(q) == key && q.ours_us < best->ours_us) best = &q;
    std::printf("%-16s %-3s %-62s %9.1f %9.2f %9.1f %6.2fx\n", best->shape.c_str(), best->layout.c_str(),
                best->config.c_str(), best->ours_tflops, best->bytes / best->ours_us * 1e-6, best->cublas_tflops,
                best->cublas_us / best->ours_us);
  }
  std::printf("\ncorrectness failures: %d\n", g_failures);
  CUBLAS_CHECK(cublasDestroy(h));
  CUDA_CHECK(cudaFree(d.a));
  CUDA_CHECK(cudaFree(d.b));
  CUDA_CHECK(cudaFree(d.c));
  CUDA_CHECK(cudaFree(d.c0));
  CUDA_CHECK(cudaFree(d.ref));
  CUDA_CHECK(cudaFree(d.cub));
  CUDA_CHECK(cudaFree(d.outf));
  CUDA_CHECK(cudaFree(d.ws));
  CUDA_CHECK(cudaFree(d.counters));
  return g_failures ? 1 : 0;
}
