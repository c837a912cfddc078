// membound_check.cu — standalone GPU check of the memory-bound templates: softmax, layernorm,
// rmsnorm, reduce_sum, transpose (templates/<name>/<name>.cuh).
//
// For a focused set of configs per template (the ones expected to win at the benchmark shapes plus
// a few others) it
//   1. checks correctness against the template's own reference kernel on random inputs at awkward
//      shapes and at the benchmark shape: outputs NaN-poisoned first, relative L2 error against the
//      manifest tolerance, NaN count, a guard region past the output that must stay untouched, and
//      (reduce_sum) that the workspace reads zero again and that two runs agree bit for bit;
//   2. times each config at the benchmark shape (cudaEvent per run, median of 25 after warm-up)
//      next to a device-to-device cudaMemcpyAsync moving the same number of bytes (read + write),
//      timed in the same run, as the copy ceiling.
// The launch geometry below mirrors each manifest (templates/<name>/<name>.yaml); keep in sync.
//
// Build and run on the GPU machine, from the repository root (one command line):
//   nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I templates/common
//        bench/kernel_check/membound_check.cu -o membound_check && ./membound_check
// Options: --quick (correctness only), --no-check (timing only). Exit status 1 on any failure.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../templates/layernorm/layernorm.cuh"
#include "../../templates/reduce_sum/reduce_sum.cuh"
#include "../../templates/rmsnorm/rmsnorm.cuh"
#include "../../templates/softmax/softmax.cuh"
#include "../../templates/transpose/transpose.cuh"

namespace {

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(err_));                                                 \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int k_ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

// ---- options and results ------------------------------------------------------------------
bool g_check = true, g_time = true;
int g_sm_count = 0;
cudaStream_t g_stream;
int g_failures = 0;

struct CheckRow {
  std::string what, cfg;
  double err, tol;
  long long nans, guard_bad, extra_bad;  // extra: workspace not zero / not deterministic
  bool pass;
};
struct TimeRow {
  std::string what, cfg;
  double us, gbps, copy_gbps;
};
std::vector<CheckRow> g_checks;
std::vector<TimeRow> g_times;

template <typename T> const char* dtype_name();
template <> const char* dtype_name<float>() { return "fp32"; }
template <> const char* dtype_name<ktune_bf16>() { return "bf16"; }
template <> const char* dtype_name<ktune_fp16>() { return "fp16"; }
template <typename T> double tolerance_for();  // the manifests' tolerances (row-wise ops)
template <> double tolerance_for<float>() { return 1e-5; }
template <> double tolerance_for<ktune_bf16>() { return 2e-2; }
template <> double tolerance_for<ktune_fp16>() { return 5e-3; }

// ---- device buffers -----------------------------------------------------------------------
constexpr size_t k_guard_bytes = 4096;  // poisoned slack after every output buffer

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;  // usable bytes (the guard follows)
  DevBuf() = default;
  explicit DevBuf(size_t b) : bytes(b) { CK(cudaMalloc(&p, b + k_guard_bytes)); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  template <typename T> T* as() const { return static_cast<T*>(p); }
  void poison() const { CK(cudaMemsetAsync(p, 0xFF, bytes + k_guard_bytes, g_stream)); }  // NaN
  void zero() const { CK(cudaMemsetAsync(p, 0, bytes + k_guard_bytes, g_stream)); }
};

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void fill_uniform(T* p, long long n, float lo, float hi, unsigned long long seed) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix64(seed * 0x100000001B3ull + i) >> 40) * (1.f / 16777216.f);
    p[i] = ktune_dev::from_float<T>(lo + (hi - lo) * u);
  }
}

template <typename T>
void fill(const DevBuf& b, long long n, float lo, float hi, unsigned long long seed) {
  fill_uniform<T><<<1024, 256, 0, g_stream>>>(b.as<T>(), n, lo, hi, seed);
  CK(cudaGetLastError());
}

template <typename T> __device__ __forceinline__ unsigned raw_bits(T v) {
  if constexpr (sizeof(T) == 4) return __float_as_uint(ktune_dev::to_float(v));
  else return v.bits;
}

// acc[0] += sum (out - ref)^2, acc[1] += sum ref^2; cnt[0] += NaNs in out, cnt[1] += bit mismatches.
template <typename T>
__global__ void compare_kernel(const T* out, const T* ref, long long n, double* acc,
                               unsigned long long* cnt) {
  double d2 = 0, r2 = 0;
  unsigned long long nans = 0, diff = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float o = ktune_dev::to_float(out[i]), r = ktune_dev::to_float(ref[i]);
    if (o != o) ++nans;
    else d2 += (static_cast<double>(o) - r) * (static_cast<double>(o) - r);
    r2 += static_cast<double>(r) * r;
    diff += raw_bits(out[i]) != raw_bits(ref[i]);
  }
  for (int o = 16; o > 0; o >>= 1) {
    d2 += __shfl_xor_sync(0xffffffffu, d2, o);
    r2 += __shfl_xor_sync(0xffffffffu, r2, o);
    nans += __shfl_xor_sync(0xffffffffu, nans, o);
    diff += __shfl_xor_sync(0xffffffffu, diff, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(acc, d2);
    atomicAdd(acc + 1, r2);
    atomicAdd(cnt, nans);
    atomicAdd(cnt + 1, diff);
  }
}

// Counts bytes in [p, p + n) that differ from `expect`.
__global__ void count_bytes_not(const unsigned char* p, long long n, unsigned char expect,
                                unsigned long long* cnt) {
  unsigned long long bad = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    bad += p[i] != expect;
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(cnt, bad);
}

struct Compare {
  double rel_err;
  long long nans, mismatches, guard_bad;
};

// Compares n elements of out with ref and checks that out's guard bytes are still 0xFF.
template <typename T>
Compare compare(const DevBuf& out, const DevBuf& ref, long long n) {
  static DevBuf scratch(64);
  CK(cudaMemsetAsync(scratch.p, 0, 64, g_stream));
  double* acc = scratch.as<double>();
  auto* cnt = reinterpret_cast<unsigned long long*>(acc + 2);
  compare_kernel<T><<<1024, 256, 0, g_stream>>>(out.as<T>(), ref.as<T>(), n, acc, cnt);
  CK(cudaGetLastError());
  count_bytes_not<<<16, 256, 0, g_stream>>>(out.as<unsigned char>() + n * sizeof(T),
                                            static_cast<long long>(k_guard_bytes), 0xFF, cnt + 2);
  CK(cudaGetLastError());
  double h_acc[2];
  unsigned long long h_cnt[3];
  CK(cudaMemcpyAsync(h_acc, acc, sizeof h_acc, cudaMemcpyDeviceToHost, g_stream));
  CK(cudaMemcpyAsync(h_cnt, cnt, sizeof h_cnt, cudaMemcpyDeviceToHost, g_stream));
  CK(cudaStreamSynchronize(g_stream));
  const double rel = h_acc[1] > 0 ? std::sqrt(h_acc[0] / h_acc[1]) : std::sqrt(h_acc[0]);
  return {rel, static_cast<long long>(h_cnt[0]), static_cast<long long>(h_cnt[1]),
          static_cast<long long>(h_cnt[2])};
}

void record_check(const std::string& what, const std::string& cfg, const Compare& c, double tol,
                  long long extra_bad = 0) {
  const bool pass = c.nans == 0 && c.guard_bad == 0 && extra_bad == 0 && c.rel_err <= tol &&
                    !std::isnan(c.rel_err);
  if (!pass) ++g_failures;
  g_checks.push_back({what, cfg, c.rel_err, tol, c.nans, c.guard_bad, extra_bad, pass});
  std::printf("  check %-34s %-40s err %.3e (tol %.0e) nan %lld guard %lld%s  %s\n", what.c_str(),
              cfg.c_str(), c.rel_err, tol, c.nans, c.guard_bad,
              extra_bad ? (" extra " + std::to_string(extra_bad)).c_str() : "", pass ? "ok" : "FAIL");
}

// Median time in microseconds of `reps` runs of launch(), each between its own pair of events.
template <typename F>
double median_us(F&& launch, int warmup = 5, int reps = 25) {
  for (int i = 0; i < warmup; ++i) launch();
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(g_stream));
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(ev[2 * i], g_stream));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1], g_stream));
  }
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(g_stream));
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) {
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1e3;
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

// Copy ceiling: a device-to-device copy of metric_bytes / 2 bytes moves metric_bytes (read + write).
double copy_gbps(const DevBuf& src, const DevBuf& dst, double metric_bytes) {
  const size_t bytes = static_cast<size_t>(metric_bytes / 2);
  if (bytes > src.bytes || bytes > dst.bytes) {
    std::fprintf(stderr, "copy ceiling: buffers too small\n");
    std::exit(2);
  }
  const double us = median_us([&] {
    CK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, g_stream));
  });
  return 2.0 * bytes / us * 1e-3;
}

void record_time(const std::string& what, const std::string& cfg, double us, double metric_bytes,
                 double copy) {
  const double gbps = metric_bytes / us * 1e-3;
  g_times.push_back({what, cfg, us, gbps, copy});
  std::printf("  time  %-34s %-40s %9.1f us %7.0f GB/s  %.3f of copy (%.0f GB/s)\n", what.c_str(),
              cfg.c_str(), us, gbps, gbps / copy, copy);
}

// ============================================================================================
// Row-wise templates: softmax, layernorm, rmsnorm (same params: THREADS, ROWS_PER_BLOCK, VEC,
// MODE, UNROLL; NV derived from cols).
// ============================================================================================
enum class RowOp { softmax, layernorm, rmsnorm };
const char* row_op_name(RowOp op) {
  return op == RowOp::softmax ? "softmax" : op == RowOp::layernorm ? "layernorm" : "rmsnorm";
}

struct RowProblem {
  int rows, cols;
  const DevBuf *x, *gamma, *beta, *y;
  float eps;
};

// The manifest's constraints, for picking the configs that are valid at a given cols.
constexpr bool row_valid(int in_bytes, int threads, int rpb, int vec, int mode, int unroll, int cols) {
  const int tpr = threads / rpb;
  const int nv = mode == 0 ? k_ceil_div(cols, tpr * vec) : 1;
  const int row_regs = (mode == 0 ? nv : unroll) * vec;
  return threads <= 1024 && threads % rpb == 0 && tpr >= 4 && vec * in_bytes <= 16 &&
         cols % vec == 0 && (tpr == 4 || (tpr / 2) * vec < cols) && (mode == 1 || unroll == 1) &&
         (mode == 1 || nv <= 32) && row_regs <= 128 && (row_regs + 40) * threads <= 65536 &&
         (mode == 0 || cols > tpr * vec * unroll);
}

template <RowOp OP, typename T, int THREADS, int RPB, int VEC, int MODE, int UNROLL, int NV>
void launch_row(const RowProblem& p) {
  const dim3 grid(k_ceil_div(p.rows, RPB)), block(THREADS);
  const T* x = p.x->as<T>();
  T* y = p.y->as<T>();
  if constexpr (OP == RowOp::softmax)
    ktune_softmax<T, T, THREADS, RPB, VEC, MODE, UNROLL, NV><<<grid, block, 0, g_stream>>>(x, y, p.rows, p.cols);
  else if constexpr (OP == RowOp::layernorm)
    ktune_layernorm<T, T, THREADS, RPB, VEC, MODE, UNROLL, NV><<<grid, block, 0, g_stream>>>(
        x, p.gamma->as<T>(), p.beta->as<T>(), y, p.rows, p.cols, p.eps);
  else
    ktune_rmsnorm<T, T, THREADS, RPB, VEC, MODE, UNROLL, NV><<<grid, block, 0, g_stream>>>(
        x, p.gamma->as<T>(), y, p.rows, p.cols, p.eps);
}

template <RowOp OP, typename T>
void launch_row_ref(const RowProblem& p) {
  const dim3 grid(p.rows), block(256);
  const T* x = p.x->as<T>();
  T* y = p.y->as<T>();
  if constexpr (OP == RowOp::softmax)
    ktune_softmax_ref<T, T><<<grid, block, 0, g_stream>>>(x, y, p.rows, p.cols);
  else if constexpr (OP == RowOp::layernorm)
    ktune_layernorm_ref<T, T><<<grid, block, 0, g_stream>>>(x, p.gamma->as<T>(), p.beta->as<T>(),
                                                           y, p.rows, p.cols, p.eps);
  else
    ktune_rmsnorm_ref<T, T><<<grid, block, 0, g_stream>>>(x, p.gamma->as<T>(), y, p.rows, p.cols, p.eps);
}

// The column counts this harness runs; each config is instantiated once per valid one (NV is a
// compile-time function of cols).
constexpr int k_cols[] = {100, 1000, 1001, 4096, 10000};

// Launches config <THREADS, RPB, VEC, MODE, UNROLL> for p.cols; false if invalid there.
template <RowOp OP, typename T, int THREADS, int RPB, int VEC, int MODE, int UNROLL>
struct RowCfg {
  static std::string name() {
    char b[96];
    std::snprintf(b, sizeof b, "T%d RPB%d VEC%d MODE%d U%d", THREADS, RPB, VEC, MODE, UNROLL);
    return b;
  }
  template <int COLS>
  static bool try_cols(const RowProblem& p) {
    constexpr bool ok = row_valid(sizeof(T), THREADS, RPB, VEC, MODE, UNROLL, COLS);
    if constexpr (ok) {
      constexpr int nv = MODE == 0 ? k_ceil_div(COLS, (THREADS / RPB) * VEC) : 1;
      launch_row<OP, T, THREADS, RPB, VEC, MODE, UNROLL, nv>(p);
      return true;
    } else {
      (void)p;
      return false;
    }
  }
  static bool launch(const RowProblem& p) {
    switch (p.cols) {
      case k_cols[0]: return try_cols<k_cols[0]>(p);
      case k_cols[1]: return try_cols<k_cols[1]>(p);
      case k_cols[2]: return try_cols<k_cols[2]>(p);
      case k_cols[3]: return try_cols<k_cols[3]>(p);
      case k_cols[4]: return try_cols<k_cols[4]>(p);
      default: return false;
    }
  }
};

template <RowOp OP, typename T>
struct RowBench {
  int rows, cols;
  DevBuf x, gamma, beta, y, ref;
  RowProblem prob, ref_prob;
  double metric_bytes;
  double copy = 0;

  RowBench(int r, int c)
      : rows(r), cols(c),
        x(size_t(r) * c * sizeof(T)), gamma(size_t(c) * sizeof(T)), beta(size_t(c) * sizeof(T)),
        y(size_t(r) * c * sizeof(T)), ref(size_t(r) * c * sizeof(T)) {
    const float lo = OP == RowOp::softmax ? -4.f : OP == RowOp::layernorm ? -1.f : -2.f;
    const float hi = OP == RowOp::softmax ? 4.f : OP == RowOp::layernorm ? 3.f : 2.f;
    fill<T>(x, (long long)r * c, lo, hi, 1 + r * 7919ull + c);
    fill<T>(gamma, c, 0.5f, 1.5f, 2 + c);
    fill<T>(beta, c, -0.5f, 0.5f, 3 + c);
    const float eps = OP == RowOp::rmsnorm ? 1e-6f : 1e-5f;
    prob = {r, c, &x, &gamma, &beta, &y, eps};
    ref_prob = {r, c, &x, &gamma, &beta, &ref, eps};
    metric_bytes = double(r) * c * 2 * sizeof(T);
    ref.poison();
    launch_row_ref<OP, T>(ref_prob);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
  }
  std::string what() const {
    return std::string(row_op_name(OP)) + " " + dtype_name<T>() + " " + std::to_string(rows) + "x" +
           std::to_string(cols);
  }

  template <typename Cfg>
  void check() {
    y.poison();
    if (!Cfg::launch(prob)) return;  // invalid at this shape
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      std::printf("  check %s %s: launch failed: %s\n", what().c_str(), Cfg::name().c_str(), cudaGetErrorString(e));
      ++g_failures;
      return;
    }
    CK(cudaStreamSynchronize(g_stream));
    record_check(what(), Cfg::name(), compare<T>(y, ref, (long long)rows * cols), tolerance_for<T>());
  }

  template <typename Cfg>
  void time() {
    if (!copy) copy = copy_gbps(x, y, metric_bytes);
    if (!Cfg::launch(prob)) {
      std::printf("  time  %s %s: not valid at this shape\n", what().c_str(), Cfg::name().c_str());
      return;
    }
    CK(cudaGetLastError());
    const double us = median_us([&] { Cfg::launch(prob); });
    record_time(what(), Cfg::name(), us, metric_bytes, copy);
  }
};

// Runs every config in Cfgs... on one bench: check (if enabled) and/or time.
template <typename Bench, typename... Cfgs>
void run_all(Bench& b, bool do_check, bool do_time) {
  if (do_check && g_check) (b.template check<Cfgs>(), ...);
  if (do_time && g_time) (b.template time<Cfgs>(), ...);
}

template <RowOp OP>
void row_suite() {
  std::printf("== %s\n", row_op_name(OP));
  using bf = ktune_bf16;
  using hf = ktune_fp16;
  // bf16: the 4096-column candidates. tpr = THREADS / RPB threads per row; NV vectors per thread.
  using BfCfgs = std::tuple<
      RowCfg<OP, bf, 128, 1, 8, 0, 1>,   // 4 warps/row, 4 x 16 B per thread
      RowCfg<OP, bf, 256, 2, 8, 0, 1>,   // same rows, 2 rows per block (manifest heuristic)
      RowCfg<OP, bf, 512, 4, 8, 0, 1>,
      RowCfg<OP, bf, 256, 1, 8, 0, 1>,   // 8 warps/row, 2 x 16 B
      RowCfg<OP, bf, 512, 2, 8, 0, 1>,
      RowCfg<OP, bf, 512, 1, 8, 0, 1>,   // 16 warps/row, 1 x 16 B
      RowCfg<OP, bf, 1024, 1, 4, 0, 1>,  // 32 warps/row, 1 x 8 B
      RowCfg<OP, bf, 64, 1, 8, 0, 1>,    // 2 warps/row, 8 x 16 B
      RowCfg<OP, bf, 128, 2, 8, 0, 1>,
      RowCfg<OP, bf, 128, 4, 8, 0, 1>,   // a warp per row, 16 x 16 B (128 floats)
      RowCfg<OP, bf, 256, 8, 8, 0, 1>,
      RowCfg<OP, bf, 128, 1, 8, 1, 2>,   // streaming mode
      RowCfg<OP, bf, 256, 1, 8, 1, 1>,
      RowCfg<OP, bf, 256, 2, 2, 0, 1>,   // narrower accesses, sub-warp groups (coverage)
      RowCfg<OP, bf, 128, 16, 4, 0, 1>,
      RowCfg<OP, bf, 64, 16, 4, 1, 2>,
      RowCfg<OP, bf, 128, 32, 1, 0, 1>,
      RowCfg<OP, bf, 256, 2, 1, 0, 1>,
      RowCfg<OP, bf, 1024, 1, 1, 1, 4>>;
  using HfCfgs = std::tuple<RowCfg<OP, hf, 128, 1, 8, 0, 1>, RowCfg<OP, hf, 256, 2, 8, 0, 1>,
                            RowCfg<OP, hf, 128, 1, 8, 1, 2>, RowCfg<OP, hf, 256, 2, 1, 0, 1>>;
  using F32Cfgs = std::tuple<RowCfg<OP, float, 128, 1, 4, 0, 1>, RowCfg<OP, float, 256, 2, 4, 0, 1>,
                             RowCfg<OP, float, 256, 1, 4, 0, 1>, RowCfg<OP, float, 128, 4, 4, 0, 1>,
                             RowCfg<OP, float, 512, 1, 4, 0, 1>, RowCfg<OP, float, 256, 1, 4, 1, 2>,
                             RowCfg<OP, float, 256, 2, 1, 0, 1>>;
  auto each = [](auto& bench, auto cfgs, bool do_check, bool do_time) {
    std::apply([&](auto... c) { run_all<std::remove_reference_t<decltype(bench)>, decltype(c)...>(bench, do_check, do_time); }, cfgs);
  };
  if (g_check) {
    for (int cols : k_cols) {
      { RowBench<OP, bf> b(37, cols); each(b, BfCfgs{}, true, false); }
      { RowBench<OP, hf> b(37, cols); each(b, HfCfgs{}, true, false); }
      { RowBench<OP, float> b(37, cols); each(b, F32Cfgs{}, true, false); }
    }
  }
  {  // benchmark shape: 32768 x 4096 bf16 (checked there too), plus fp32 for reference
    RowBench<OP, bf> b(32768, 4096);
    each(b, BfCfgs{}, true, true);
  }
  if (g_time) {
    RowBench<OP, float> b(32768, 4096);
    each(b, F32Cfgs{}, false, true);
  }
}

// ============================================================================================
// reduce_sum
// ============================================================================================
constexpr int k_partials = 4096;  // the manifest's workspace size

struct ReduceBench {
  long long n;
  DevBuf x, out, ref, partials, counter;
  double metric_bytes, copy = 0;
  DevBuf copy_dst;

  explicit ReduceBench(long long n_)
      : n(n_), x(size_t(n_) * 4), out(4), ref(4), partials(k_partials * 4), counter(4),
        copy_dst(g_time ? size_t(n_) * 2 + 16 : 16) {
    fill<float>(x, n, 0.f, 1.f, 77 + n);
    partials.zero();
    counter.zero();
    metric_bytes = double(n) * 4;
    ref.poison();
    ktune_reduce_sum_ref<float, float><<<1, 1024, 0, g_stream>>>(x.as<float>(), ref.as<float>(),
                                                                partials.as<float>(), counter.as<int>(), n);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
  }
  std::string what() const { return "reduce_sum fp32 n=" + std::to_string(n); }

  template <int THREADS, int VEC, int UNROLL, int BPS>
  void launch() {
    const long long want = (n + THREADS * VEC - 1) / (THREADS * VEC);
    const int blocks = static_cast<int>(std::max(1LL, std::min<long long>(g_sm_count * BPS, want)));
    ktune_reduce_sum<float, float, THREADS, VEC, UNROLL, BPS><<<blocks, THREADS, 0, g_stream>>>(
        x.as<float>(), out.as<float>(), partials.as<float>(), counter.as<int>(), n);
  }
  // Non-zero bytes left in the workspace.
  long long workspace_dirty() {
    static DevBuf c(8);
    CK(cudaMemsetAsync(c.p, 0, 8, g_stream));
    count_bytes_not<<<16, 256, 0, g_stream>>>(partials.as<unsigned char>(), k_partials * 4, 0, c.as<unsigned long long>());
    count_bytes_not<<<1, 32, 0, g_stream>>>(counter.as<unsigned char>(), 4, 0, c.as<unsigned long long>());
    CK(cudaGetLastError());
    unsigned long long h;
    CK(cudaMemcpyAsync(&h, c.p, 8, cudaMemcpyDeviceToHost, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    return static_cast<long long>(h);
  }

  template <int THREADS, int VEC, int UNROLL, int BPS>
  static std::string name() {
    char b[64];
    std::snprintf(b, sizeof b, "T%d VEC%d U%d BPS%d", THREADS, VEC, UNROLL, BPS);
    return b;
  }

  template <int THREADS, int VEC, int UNROLL, int BPS>
  void check() {
    out.poison();
    launch<THREADS, VEC, UNROLL, BPS>();
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
    const Compare c = compare<float>(out, ref, 1);
    float first, second;
    CK(cudaMemcpy(&first, out.p, 4, cudaMemcpyDeviceToHost));
    long long dirty = workspace_dirty();
    launch<THREADS, VEC, UNROLL, BPS>();  // a second run must give the same bits
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaMemcpy(&second, out.p, 4, cudaMemcpyDeviceToHost));
    dirty += workspace_dirty();
    const long long nondet = std::memcmp(&first, &second, 4) != 0;
    record_check(what(), name<THREADS, VEC, UNROLL, BPS>(), c, 1e-5, dirty + nondet);
  }

  template <int THREADS, int VEC, int UNROLL, int BPS>
  void time() {
    if (!copy) copy = copy_gbps(x, copy_dst, metric_bytes);
    const double us = median_us([&] { launch<THREADS, VEC, UNROLL, BPS>(); });
    const long long dirty = workspace_dirty();  // after 30 back-to-back launches
    if (dirty) {
      std::printf("  time  %s: workspace dirty after timing runs (%lld bytes)\n", name<THREADS, VEC, UNROLL, BPS>().c_str(), dirty);
      ++g_failures;
    }
    record_time(what(), name<THREADS, VEC, UNROLL, BPS>(), us, metric_bytes, copy);
  }
};

#define REDUCE_CFGS(X)                                                  \
  X(512, 4, 4, 2) X(256, 4, 4, 4) X(256, 4, 8, 4) X(512, 4, 8, 2)       \
  X(128, 4, 8, 8) X(1024, 4, 4, 1) X(256, 4, 2, 8) X(512, 4, 2, 4)      \
  X(1024, 4, 2, 2) X(256, 2, 8, 4) X(256, 1, 8, 4) X(512, 4, 4, 4)

void reduce_suite() {
  std::printf("== reduce_sum\n");
  if (g_check) {
    for (long long n : {1LL, 1000LL, 100000003LL}) {
      ReduceBench b(n);
#define X(a, b_, c, d) b.check<a, b_, c, d>();
      REDUCE_CFGS(X)
#undef X
    }
  }
  ReduceBench b(100000000LL);
#define X(a, b_, c, d) \
  if (g_check) b.check<a, b_, c, d>(); \
  if (g_time) b.time<a, b_, c, d>();
  REDUCE_CFGS(X)
#undef X
}

// ============================================================================================
// transpose
// ============================================================================================
constexpr bool transpose_valid(int in_bytes, int tr, int tc, int threads, int vec, int layout,
                               int rows, int cols) {
  const int smem = tc * (tr / vec + (layout == 0 ? 1 : 0)) * vec * in_bytes;
  return vec * in_bytes <= 16 && rows % vec == 0 && cols % vec == 0 &&
         (tr / vec) * (tc / vec) % threads == 0 && tr * tc / (vec * threads) <= 16 &&
         smem <= 49152 && tc * in_bytes >= 128;
}

template <typename T>
struct TransposeBench {
  int rows, cols;
  DevBuf in, out, ref;
  double metric_bytes, copy = 0;

  TransposeBench(int r, int c)
      : rows(r), cols(c), in(size_t(r) * c * sizeof(T)), out(size_t(r) * c * sizeof(T)),
        ref(size_t(r) * c * sizeof(T)) {
    fill<T>(in, (long long)r * c, -1.f, 1.f, 99 + r * 31ull + c);
    metric_bytes = 2.0 * r * c * sizeof(T);
    ref.poison();
    const long long n = (long long)r * c;
    ktune_transpose_ref<T, T><<<k_ceil_div(n, 256), 256, 0, g_stream>>>(in.as<T>(), ref.as<T>(), r, c);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
  }
  std::string what() const {
    return std::string("transpose ") + dtype_name<T>() + " " + std::to_string(rows) + "x" + std::to_string(cols);
  }

  template <int TR, int TC, int THREADS, int VEC, int LAYOUT>
  bool launch() {
    if (!transpose_valid(sizeof(T), TR, TC, THREADS, VEC, LAYOUT, rows, cols)) return false;
    const int blocks = k_ceil_div(cols, TC) * k_ceil_div(rows, TR);
    ktune_transpose<T, T, TR, TC, THREADS, VEC, LAYOUT><<<blocks, THREADS, 0, g_stream>>>(
        in.as<T>(), out.as<T>(), rows, cols);
    return true;
  }
  template <int TR, int TC, int THREADS, int VEC, int LAYOUT>
  static std::string name() {
    char b[80];
    std::snprintf(b, sizeof b, "%dx%d T%d VEC%d %s", TR, TC, THREADS, VEC, LAYOUT ? "swizzle" : "pad");
    return b;
  }
  template <int TR, int TC, int THREADS, int VEC, int LAYOUT>
  void check() {
    out.poison();
    if (!launch<TR, TC, THREADS, VEC, LAYOUT>()) return;
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
    const Compare c = compare<T>(out, ref, (long long)rows * cols);
    // Exact copy: tolerance 0, and every element's bits must match.
    record_check(what(), name<TR, TC, THREADS, VEC, LAYOUT>(), c, 0.0, c.mismatches);
  }
  template <int TR, int TC, int THREADS, int VEC, int LAYOUT>
  void time() {
    if (!copy) copy = copy_gbps(in, out, metric_bytes);
    if (!launch<TR, TC, THREADS, VEC, LAYOUT>()) {
      std::printf("  time  %s %s: not valid at this shape\n", what().c_str(), name<TR, TC, THREADS, VEC, LAYOUT>().c_str());
      return;
    }
    CK(cudaGetLastError());
    const double us = median_us([&] { launch<TR, TC, THREADS, VEC, LAYOUT>(); });
    record_time(what(), name<TR, TC, THREADS, VEC, LAYOUT>(), us, metric_bytes, copy);
  }
};

// TILE_R, TILE_C, THREADS, VEC, SMEM_LAYOUT
#define TRANSPOSE_F32_CFGS(X)                                                              \
  X(64, 128, 256, 4, 1) X(64, 128, 256, 4, 0) X(64, 128, 512, 4, 1) X(64, 64, 256, 4, 1)   \
  X(32, 128, 256, 4, 1) X(128, 64, 256, 4, 1) X(64, 64, 128, 4, 1) X(64, 64, 256, 2, 1)    \
  X(32, 32, 256, 1, 0) X(32, 64, 256, 1, 1)
#define TRANSPOSE_16_CFGS(X)                                                               \
  X(64, 128, 128, 8, 1) X(128, 128, 256, 8, 1) X(64, 64, 64, 8, 1) X(64, 128, 256, 4, 1)   \
  X(64, 128, 128, 8, 0) X(32, 64, 256, 1, 0) X(64, 64, 256, 2, 1)

void transpose_suite() {
  std::printf("== transpose\n");
  if (g_check) {
    for (auto [r, c] : {std::pair{1000, 777}, std::pair{1000, 776}, std::pair{40, 4104}, std::pair{8, 8}}) {
      { TransposeBench<float> b(r, c);
#define X(a, b_, c_, d, e) b.check<a, b_, c_, d, e>();
        TRANSPOSE_F32_CFGS(X)
#undef X
      }
      { TransposeBench<ktune_bf16> b(r, c);
#define X(a, b_, c_, d, e) b.check<a, b_, c_, d, e>();
        TRANSPOSE_16_CFGS(X)
#undef X
      }
      { TransposeBench<ktune_fp16> b(r, c);
        b.check<64, 128, 128, 8, 1>();
        b.check<32, 64, 256, 1, 0>();
      }
    }
  }
  {
    TransposeBench<float> b(16384, 16384);
#define X(a, b_, c_, d, e) \
  if (g_check) b.check<a, b_, c_, d, e>(); \
  if (g_time) b.time<a, b_, c_, d, e>();
    TRANSPOSE_F32_CFGS(X)
#undef X
  }
  if (g_time) {
    TransposeBench<ktune_bf16> b(16384, 16384);
#define X(a, b_, c_, d, e) b.time<a, b_, c_, d, e>();
    TRANSPOSE_16_CFGS(X)
#undef X
  }
}

// ---- summary --------------------------------------------------------------------------------
void print_summary() {
  std::printf("\n==== correctness: %zu checks, %d failed\n", g_checks.size(), g_failures);
  for (const auto& c : g_checks)
    if (!c.pass)
      std::printf("  FAIL %-34s %-40s err %.3e tol %.0e nan %lld guard %lld extra %lld\n", c.what.c_str(),
                  c.cfg.c_str(), c.err, c.tol, c.nans, c.guard_bad, c.extra_bad);
  if (g_times.empty()) return;
  std::printf("\n==== timing (median of 25; copy = cudaMemcpyAsync D2D, read + write bytes)\n");
  std::printf("%-34s %-40s %10s %9s %7s\n", "problem", "config", "us", "GB/s", "x copy");
  std::string last;
  for (const auto& t : g_times) {
    if (t.what != last) {
      std::printf("%-34s %-40s %10s %9.0f %7s\n", t.what.c_str(), "(copy ceiling)", "", t.copy_gbps, "1.000");
      last = t.what;
    }
    std::printf("%-34s %-40s %10.1f %9.0f %7.3f\n", "", t.cfg.c_str(), t.us, t.gbps, t.gbps / t.copy_gbps);
  }
  std::printf("\n==== best per problem\n");
  std::vector<std::string> seen;
  for (const auto& t : g_times) {
    if (std::find(seen.begin(), seen.end(), t.what) != seen.end()) continue;
    seen.push_back(t.what);
    const TimeRow* best = &t;
    for (const auto& u : g_times)
      if (u.what == t.what && u.us < best->us) best = &u;
    std::printf("%-34s %-40s %9.0f GB/s %7.3f x copy%s\n", best->what.c_str(), best->cfg.c_str(),
                best->gbps, best->gbps / best->copy_gbps, best->gbps / best->copy_gbps >= 0.9 ? "" : "  (< 0.90)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) g_time = false;
    else if (!std::strcmp(argv[i], "--no-check")) g_check = false;
    else {
      std::fprintf(stderr, "usage: %s [--quick | --no-check]\n", argv[0]);
      return 2;
    }
  }
  int dev;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  g_sm_count = prop.multiProcessorCount;
  std::printf("device: %s, cc %d.%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));

  row_suite<RowOp::softmax>();
  row_suite<RowOp::layernorm>();
  row_suite<RowOp::rmsnorm>();
  reduce_suite();
  transpose_suite();

  print_summary();
  CK(cudaStreamDestroy(g_stream));
  return g_failures ? 1 : 0;
}
