// ktune-launch-bench: a C++ application launching the kernels ktuned serves (ktune::Launcher and
// the typed helpers) for a transformer MLP block's GEMMs and the row ops, against cuBLAS on the
// same buffers: checks every GEMM output against cuBLAS (row ops against a host reference),
// times both with CUDA events in the same run, and measures the first-call cost (lookup + kernel
// fetch + module load) and the steady per-call host time of ktune::gemm above a raw
// cuLaunchKernelEx of the same function with prepacked arguments.
//   ktune-launch-bench --socket $S --out launch-cpp.json
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "client/cuda_api.h"
#include "client/launcher.h"

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
const ktune::cuda::CudaApi* api = nullptr;

#define CHECK_CU(call)                                                    \
  do {                                                                    \
    if (CUresult r_ = (call); r_ != CUDA_SUCCESS) {                       \
      std::fprintf(stderr, "%s: %s\n", #call, api->describe(r_).c_str()); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// cublasGemmEx through dlopen, as the worker does (no link-time dependency).
struct Cublas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*set_stream)(Handle, CUstream) = nullptr;
  int (*gemm_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*,
                 int, int, const void*, void*, int, int, int, int) = nullptr;
  Handle handle = nullptr;
  bool load(CUstream stream) {
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) return false;
    create = reinterpret_cast<decltype(create)>(::dlsym(lib, "cublasCreate_v2"));
    set_stream = reinterpret_cast<decltype(set_stream)>(::dlsym(lib, "cublasSetStream_v2"));
    gemm_ex = reinterpret_cast<decltype(gemm_ex)>(::dlsym(lib, "cublasGemmEx"));
    if (!create || !set_stream || !gemm_ex || create(&handle) != 0) return false;
    set_stream(handle, stream);
    return true;
  }
  // Row-major C[M,N] = A[M,K] W[N,K]^T (nn.Linear), bf16 in and out, fp32 compute.
  int linear(CUdeviceptr a, CUdeviceptr w, CUdeviceptr c, int M, int N, int K) const {
    const float alpha = 1, beta = 0;
    return gemm_ex(handle, 1, 0, N, M, K, &alpha, reinterpret_cast<void*>(w), 14, K,
                   reinterpret_cast<void*>(a), 14, K, &beta, reinterpret_cast<void*>(c), 14, N, 68,
                   -1);
  }
};

struct Buffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  explicit Buffer(size_t n) : bytes(n) { CHECK_CU(api->cuMemAlloc(&ptr, n)); }
  ~Buffer() { api->cuMemFree(ptr); }
};

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void fill(const Buffer& b, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<std::uint16_t> h(b.bytes / 2);
  for (auto& x : h) x = to_bf16(d(rng));
  CHECK_CU(api->cuMemcpyHtoD(b.ptr, h.data(), b.bytes));
}

std::vector<float> download(const Buffer& b) {
  std::vector<std::uint16_t> h(b.bytes / 2);
  CHECK_CU(api->cuMemcpyDtoH(h.data(), b.ptr, b.bytes));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = from_bf16(h[i]);
  return f;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num += double(got[i] - ref[i]) * (got[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Median GPU microseconds of `fn` over `reps` event-timed runs after warm-up.
template <typename F>
double time_us(CUstream s, F&& fn, int reps = 20) {
  for (int i = 0; i < 5; ++i) fn();
  CUevent a, b;
  CHECK_CU(api->cuEventCreate(&a, 0));
  CHECK_CU(api->cuEventCreate(&b, 0));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    CHECK_CU(api->cuEventRecord(a, s));
    fn();
    CHECK_CU(api->cuEventRecord(b, s));
    CHECK_CU(api->cuEventSynchronize(b));
    float ms = 0;
    CHECK_CU(api->cuEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  api->cuEventDestroy(a);
  api->cuEventDestroy(b);
  return median(t);
}

// Median host microseconds per call of `fn` over `n` back-to-back calls (no sync inside).
template <typename F>
double host_us(CUstream s, F&& fn, int n = 200) {
  std::vector<double> per;
  for (int rep = 0; rep < 7; ++rep) {
    CHECK_CU(api->cuStreamSynchronize(s));
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) fn();
    per.push_back(us_since(t0) / n);
    CHECK_CU(api->cuStreamSynchronize(s));
  }
  return median(per);
}

// The same kernel as `k`, loaded separately, launched with prepacked arguments: the floor.
struct RawLaunch {
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  CUlaunchConfig config{};
  std::vector<std::uint64_t> storage;
  std::vector<void*> params;
  std::vector<std::unique_ptr<Buffer>> workspaces;
  RawLaunch(const ktune::Kernel& k, const std::vector<CUdeviceptr>& buffers, CUstream s) {
    CHECK_CU(api->cuModuleLoadData(&module, k.cubin().data()));
    CHECK_CU(api->cuModuleGetFunction(&fn, module, k.image().lowered_name.c_str()));
    const auto& d = k.description();
    CHECK_CU(
        api->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(d.smem)));
    size_t next = 0;
    for (const auto& a : d.args) {
      std::uint64_t v = 0;
      if (a.kind == ktune::protocol::ArgKind::scalar) {
        if (a.dtype == "f32") {
          const float f = float(a.value);
          std::memcpy(&v, &f, 4);
        } else if (a.dtype == "i32") {
          const std::int32_t i = std::int32_t(a.value);
          std::memcpy(&v, &i, 4);
        } else {
          v = std::uint64_t(std::int64_t(a.value));
        }
      } else if (a.kind == ktune::protocol::ArgKind::workspace) {
        workspaces.push_back(std::make_unique<Buffer>(size_t(a.bytes)));
        CHECK_CU(api->cuMemsetD8(workspaces.back()->ptr, 0, size_t(a.bytes)));
        v = workspaces.back()->ptr;
      } else {
        v = buffers[next++];
      }
      storage.push_back(v);
    }
    for (auto& v : storage) params.push_back(&v);
    config.gridDimX = d.grid[0], config.gridDimY = d.grid[1], config.gridDimZ = d.grid[2];
    config.blockDimX = d.block[0], config.blockDimY = d.block[1], config.blockDimZ = d.block[2];
    config.sharedMemBytes = d.smem;
    config.hStream = s;
  }
  void operator()() { CHECK_CU(api->cuLaunchKernelEx(&config, fn, params.data(), nullptr)); }
};

Json bench_gemm(ktune::Launcher& launcher, Cublas& cublas, CUstream s, int M, int N, int K,
                const char* role) {
  Buffer a(size_t(M) * K * 2), w(size_t(N) * K * 2), c(size_t(M) * N * 2), ref(size_t(M) * N * 2);
  fill(a, -1, 1, 1);
  fill(w, -1, 1, 2);
  const ktune::GemmShape shape(M, N, K);
  const auto t0 = Clock::now();
  auto first = ktune::gemm(launcher, shape, a.ptr, w.ptr, c.ptr, s);
  CHECK_CU(api->cuStreamSynchronize(s));
  const double first_us = us_since(t0);
  if (!first) {
    std::fprintf(stderr, "ktune::gemm %dx%dx%d: %s\n", M, N, K, first.error().message.c_str());
    return {{"role", role}, {"error", first.error().message}};
  }
  if (cublas.linear(a.ptr, w.ptr, ref.ptr, M, N, K) != 0) std::exit(1);
  CHECK_CU(api->cuStreamSynchronize(s));
  const auto got = download(c), expected = download(ref), av = download(a), wv = download(w);
  const double err = rel_l2(got, expected);
  // Against fp64 on 512 sampled outputs, and how many outputs differ bitwise from cuBLAS.
  std::mt19937 rng(7);
  double num_k = 0, num_c = 0, den = 0;
  for (int s_ = 0; s_ < 512; ++s_) {
    const size_t i = rng() % size_t(M), j = rng() % size_t(N);
    double exact = 0;
    for (int k = 0; k < K; ++k) exact += double(av[i * K + k]) * wv[j * K + k];
    num_k += (got[i * N + j] - exact) * (got[i * N + j] - exact);
    num_c += (expected[i * N + j] - exact) * (expected[i * N + j] - exact);
    den += exact * exact;
  }
  size_t differing = 0;
  for (size_t i = 0; i < got.size(); ++i) differing += got[i] != expected[i];
  auto kernel = *launcher.kernel({"gemm", "bf16", "", "rc", {{"M", M}, {"N", N}, {"K", K}}});
  const double ktune_us =
      time_us(s, [&] { (void)ktune::gemm(launcher, shape, a.ptr, w.ptr, c.ptr, s); });
  const double cublas_us = time_us(s, [&] { cublas.linear(a.ptr, w.ptr, ref.ptr, M, N, K); });
  RawLaunch raw(*kernel, {a.ptr, w.ptr, c.ptr}, s);
  const double host_ktune =
      host_us(s, [&] { (void)ktune::gemm(launcher, shape, a.ptr, w.ptr, c.ptr, s); });
  const double host_raw = host_us(s, raw);
  const double host_cublas = host_us(s, [&] { cublas.linear(a.ptr, w.ptr, ref.ptr, M, N, K); });
  Json params = Json::object();
  for (const auto& [n, v] : kernel->image().params) params[n] = v;
  const double flops = 2.0 * M * N * K;
  return {{"role", role},
          {"M", M},
          {"N", N},
          {"K", K},
          {"template", kernel->image().template_name},
          {"params", params},
          {"rel_l2_vs_cublas", err},
          {"elements_differing_from_cublas", differing},
          {"elements", got.size()},
          {"ktune_rel_l2_vs_fp64_512_samples", std::sqrt(num_k / den)},
          {"cublas_rel_l2_vs_fp64_512_samples", std::sqrt(num_c / den)},
          {"ktune_us", ktune_us},
          {"cublas_us", cublas_us},
          {"ktune_tflops", flops / ktune_us / 1e6},
          {"cublas_tflops", flops / cublas_us / 1e6},
          {"speed_vs_cublas", cublas_us / ktune_us},
          {"first_call_us", first_us},
          {"host_us_per_call",
           {{"ktune_gemm", host_ktune},
            {"raw_cuLaunchKernelEx", host_raw},
            {"cublasGemmEx", host_cublas},
            {"overhead", host_ktune - host_raw}}}};
}

// Row ops: a host reference for correctness, GPU time and GB/s.
Json bench_rows(ktune::Launcher& launcher, CUstream s, const std::string& op, int rows, int cols) {
  Buffer x(size_t(rows) * cols * 2), g(size_t(cols) * 2), b(size_t(cols) * 2),
      y(size_t(rows) * cols * 2);
  fill(x, -3, 3, 3);
  fill(g, 0.5f, 1.5f, 4);
  fill(b, -0.5f, 0.5f, 5);
  auto run = [&] {
    if (op == "softmax") return ktune::softmax(launcher, rows, cols, "bf16", x.ptr, y.ptr, s);
    if (op == "rmsnorm")
      return ktune::rmsnorm(launcher, rows, cols, "bf16", x.ptr, g.ptr, y.ptr, 1e-6f, s);
    return ktune::layernorm(launcher, rows, cols, "bf16", x.ptr, g.ptr, b.ptr, y.ptr, 1e-5f, s);
  };
  const auto t0 = Clock::now();
  auto first = run();
  CHECK_CU(api->cuStreamSynchronize(s));
  const double first_us = us_since(t0);
  if (!first) return {{"op", op}, {"error", first.error().message}};
  const auto xs = download(x), gs = download(g), bs = download(b), ys = download(y);
  std::vector<float> ref(ys.size());
  for (int r = 0; r < rows; ++r) {
    const float* in = &xs[size_t(r) * cols];
    double mx = -INFINITY, sum = 0, sq = 0, mean = 0, var = 0;
    for (int c = 0; c < cols; ++c)
      mx = std::max(mx, double(in[c])), mean += in[c], sq += double(in[c]) * in[c];
    mean /= cols;
    for (int c = 0; c < cols; ++c)
      sum += std::exp(in[c] - mx), var += (in[c] - mean) * (in[c] - mean);
    var /= cols;
    for (int c = 0; c < cols; ++c)
      ref[size_t(r) * cols + c] =
          op == "softmax"   ? float(std::exp(in[c] - mx) / sum)
          : op == "rmsnorm" ? float(in[c] / std::sqrt(sq / cols + 1e-6) * gs[c])
                            : float((in[c] - mean) / std::sqrt(var + 1e-5) * gs[c] + bs[c]);
  }
  const double us = time_us(s, [&] { (void)run(); });
  const double bytes = 2.0 * 2 * rows * cols;
  return {{"op", op},
          {"rows", rows},
          {"cols", cols},
          {"rel_l2_vs_host", rel_l2(ys, ref)},
          {"ktune_us", us},
          {"ktune_gbps", bytes / us / 1e3},
          {"first_call_us", first_us},
          {"host_us_per_call", host_us(
                                   s, [&] { (void)run(); }, 1000)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ktune-launch-bench: launch ktune's served kernels from C++, against cuBLAS"};
  std::string socket, out = "launch-cpp.json";
  app.add_option("--socket", socket, "ktuned's socket")->required();
  app.add_option("--out", out, "results JSON");
  CLI11_PARSE(app, argc, argv);
  auto got = ktune::cuda::CudaApi::get();
  if (!got) return std::fprintf(stderr, "%s\n", got.error().message.c_str()), 1;
  api = *got;
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CHECK_CU(api->cuDeviceGet(&dev, 0));
  CHECK_CU(api->cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(api->cuCtxSetCurrent(ctx));
  CHECK_CU(api->cuStreamCreate(&s, 0));
  Cublas cublas;
  if (!cublas.load(s)) return std::fprintf(stderr, "no cuBLAS\n"), 1;
  ktune::ClientOptions o;
  o.socket_path = socket;
  ktune::Client client(o);
  ktune::Launcher launcher(client);
  Json gemms = Json::array();
  // Gate and up projections share a shape; down projects back.
  gemms.push_back(bench_gemm(launcher, cublas, s, 4096, 14336, 4096, "gate/up: x[4096,4096] W1^T"));
  gemms.push_back(bench_gemm(launcher, cublas, s, 4096, 4096, 14336, "down: h[4096,14336] W2^T"));
  gemms.push_back(
      bench_gemm(launcher, cublas, s, 16, 4096, 4096, "decode: x[16,4096] W^T (split-K)"));
  Json rows = Json::array();
  for (const char* op : {"softmax", "rmsnorm", "layernorm"}) {
    rows.push_back(bench_rows(launcher, s, op, 32768, 4096));
    rows.push_back(bench_rows(launcher, s, op, 4096, 4096));
  }
  const Json result = {{"bench", "ktune-launch-bench"}, {"gemm", gemms}, {"rows", rows}};
  std::ofstream(out) << result.dump(2) << "\n";
  std::printf("%s\n", result.dump(2).c_str());
  return 0;
}
