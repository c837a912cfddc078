// GPU tests (ctest label "gpu") of the launch path: kernels served by a real ktuned, launched
// through ktune::Kernel / the typed helpers on a real GPU, checked against host references. Skip
// cleanly without a GPU. On the GPU machine: KTUNED=<ktuned> KTUNE_HOME=<checkout>
// ./client_gpu_tests
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "client/cuda_api.h"
#include "client/launcher.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A device buffer in the primary context of GPU 0.
struct DeviceBuffer {
  const cuda::CudaApi* api = nullptr;
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  DeviceBuffer(const cuda::CudaApi* a, size_t n) : api(a), bytes(n) { api->cuMemAlloc(&ptr, n); }
  ~DeviceBuffer() {
    if (ptr) api->cuMemFree(ptr);
  }
  template <typename T>
  void upload(const std::vector<T>& v) {
    api->cuMemcpyHtoD(ptr, v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> download(size_t n) {
    std::vector<T> v(n);
    api->cuMemcpyDtoH(v.data(), ptr, n * sizeof(T));
    return v;
  }
};

class KernelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = cuda::CudaApi::get();
    if (!api) GTEST_SKIP() << api.error().message;
    m_api = *api;
    int count = 0;
    if (m_api->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) GTEST_SKIP() << "no GPU";
    CUdevice dev = 0;
    ASSERT_EQ(m_api->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(m_api->cuDevicePrimaryCtxRetain(&m_ctx, dev), CUDA_SUCCESS);
    ASSERT_EQ(m_api->cuCtxSetCurrent(m_ctx), CUDA_SUCCESS);
    ASSERT_EQ(m_api->cuStreamCreate(&m_stream, 0), CUDA_SUCCESS);
    m_daemon =
        std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "data",
                                        std::vector<std::string>{"--set", "tuning.gpu_policy=never",
                                                                 "--set", "tuning.on_miss=false"});
    ASSERT_TRUE(m_daemon->start()) << "ktuned did not start";
    ClientOptions o;
    o.socket_path = m_daemon->socket();
    m_client = std::make_unique<Client>(o);
    m_launcher = std::make_unique<Launcher>(*m_client);
  }
  void TearDown() override {
    if (m_stream) m_api->cuStreamDestroy(m_stream);
  }

  std::vector<float> random(size_t n, float lo, float hi, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = from_bf16(to_bf16(d(rng)));  // exactly representable in bf16
    return v;
  }
  static std::vector<std::uint16_t> bf16(const std::vector<float>& v) {
    std::vector<std::uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
    return out;
  }

  // Relative L2 error of a bf16 result against a float reference.
  static double rel_error(const std::vector<std::uint16_t>& got, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = double(from_bf16(got[i])) - ref[i];
      if (std::isnan(from_bf16(got[i]))) return INFINITY;
      num += d * d;
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }

  // C = A[M,K] * W[N,K]^T through ktune::gemm (layout rc), against a double host reference.
  void check_gemm(std::int64_t M, std::int64_t N, std::int64_t K) {
    const auto a = random(size_t(M * K), -1, 1, 1), w = random(size_t(N * K), -1, 1, 2);
    DeviceBuffer da(m_api, a.size() * 2), dw(m_api, w.size() * 2), dc(m_api, size_t(M * N) * 2);
    da.upload(bf16(a));
    dw.upload(bf16(w));
    for (int run = 0; run < 2; ++run) {  // twice: split-K tickets must be left zeroed
      auto ok = gemm(*m_launcher, {M, N, K}, da.ptr, dw.ptr, dc.ptr, m_stream);
      ASSERT_TRUE(ok) << ok.error().message;
    }
    ASSERT_EQ(m_api->cuStreamSynchronize(m_stream), CUDA_SUCCESS);
    const auto ref = gemm_reference(a, w, M, N, K);
    EXPECT_LT(rel_error(dc.download<std::uint16_t>(ref.size()), ref), 1e-2);
  }

  // C[M,N] = A[M,K] * W[N,K]^T in double.
  static std::vector<double> gemm_reference(const std::vector<float>& a,
                                            const std::vector<float>& w, std::int64_t M,
                                            std::int64_t N, std::int64_t K) {
    std::vector<double> ref(size_t(M * N));
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (std::int64_t k = 0; k < K; ++k)
          s += double(a[size_t(i * K + k)]) * w[size_t(j * K + k)];
        ref[size_t(i * N + j)] = s;
      }
    return ref;
  }

  TempDir m_dir;
  const cuda::CudaApi* m_api = nullptr;
  CUcontext m_ctx = nullptr;
  CUstream m_stream = nullptr;
  std::unique_ptr<DaemonProcess> m_daemon;
  std::unique_ptr<Client> m_client;
  std::unique_ptr<Launcher> m_launcher;
};

TEST_F(KernelGpuTest, GemmMatchesTheHostReference) {
  check_gemm(256, 512, 384);
}

// A decode shape whose served config splits K (workspaces: partials and tickets).
TEST_F(KernelGpuTest, SplitKGemmMatchesTheHostReference) {
  auto k = m_launcher->kernel({"gemm", "bf16", "", "rc", {{"M", 16}, {"N", 4096}, {"K", 4096}}});
  ASSERT_TRUE(k) << k.error().message;
  bool split = false;
  for (const auto& [n, v] : (*k)->image().params) split |= n == "SPLIT_K" && v > 1;
  EXPECT_TRUE(split) << "the heuristic splits K for 16x4096x4096 (docs: decode M <= 16)";
  check_gemm(16, 4096, 4096);
}

// Batch sizes of one split-K config, one stream, in the order a server meets them: M = 16 is
// fetched, M = 8 and M = 64 are Kernels of its config (create_like: its cubin, module and
// workspaces); M = 64 needs more workspace and gets larger ones, and M = 8 and 16 launch again on
// what they had. Every result matches (the shared tile tickets are left zeroed by every shape;
// partials are written before they are read).
TEST_F(KernelGpuTest, BatchSizesOfOneSplitKConfigShareItsModuleAndWorkspaces) {
  const std::int64_t N = 4096, K = 4096;
  auto first = m_launcher->kernel({"gemm", "bf16", "", "rc", {{"M", 16}, {"N", N}, {"K", K}}});
  ASSERT_TRUE(first) << first.error().message;
  std::map<std::int64_t, std::shared_ptr<Kernel>> kernels{{16, *first}};
  for (std::int64_t m : {8, 64}) {  // the same template and params at another shape
    protocol::KernelRequest r;
    r.problem = {"gemm", "bf16", "", "rc", {{"M", m}, {"N", N}, {"K", K}}};
    r.template_name = (*first)->image().template_name;
    r.params = (*first)->image().params;
    auto image = m_client->kernel(r);
    ASSERT_TRUE(image) << image.error().message;
    auto k = Kernel::create_like(**first, image->launch, image->problem_key);
    ASSERT_TRUE(k) << k.error().message;
    EXPECT_EQ((*k)->cubin().data(), (*first)->cubin().data());
    kernels[m] = *k;
  }
  auto workspace_bytes = [](const Kernel& k) {
    std::int64_t bytes = 0;
    for (const auto& a : k.description().args)
      if (a.kind == protocol::ArgKind::workspace) bytes += a.bytes;
    return bytes;
  };
  ASSERT_GT(workspace_bytes(*kernels[16]), 0) << "a split-K config";
  ASSERT_GT(workspace_bytes(*kernels[64]), workspace_bytes(*kernels[16])) << "M = 64 needs more";
  const auto w = random(size_t(N * K), -1, 1, 2);
  DeviceBuffer dw(m_api, w.size() * 2);
  dw.upload(bf16(w));
  for (std::int64_t m : {16, 8, 64, 8, 16, 64}) {
    const auto a = random(size_t(m * K), -1, 1, 100 + unsigned(m));
    DeviceBuffer da(m_api, a.size() * 2), dc(m_api, size_t(m * N) * 2);
    da.upload(bf16(a));
    m_api->cuMemsetD8(dc.ptr, 0xff, dc.bytes);  // NaN in bf16: every element must be written
    auto ok = kernels[m]->launch({da.ptr, dw.ptr, dc.ptr}, m_stream);
    ASSERT_TRUE(ok) << "M = " << m << ": " << ok.error().message;
    ASSERT_EQ(m_api->cuStreamSynchronize(m_stream), CUDA_SUCCESS) << "M = " << m;
    const auto ref = gemm_reference(a, w, m, N, K);
    EXPECT_LT(rel_error(dc.download<std::uint16_t>(ref.size()), ref), 1e-2) << "M = " << m;
  }
}

// Two non-blocking streams run one split-K shape at once, each on its own inputs, each stream's
// first launch right after its workspaces were zeroed: both results match. (One Kernel kept one
// set of workspaces per context, so the two streams' launches mixed each other's fp32 partials
// and tile tickets; and its zeroing went to the legacy stream, unordered against these.)
TEST_F(KernelGpuTest, TwoStreamsRunningOneSplitKShapeAtOnceBothMatch) {
  const std::int64_t M = 16, N = 4096, K = 4096;  // the heuristic splits K here (test above)
  CUstream streams[2] = {nullptr, nullptr};
  for (auto& st : streams)
    ASSERT_EQ(m_api->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto w = random(size_t(N * K), -1, 1, 2);
  DeviceBuffer dw(m_api, w.size() * 2);
  dw.upload(bf16(w));
  std::vector<std::vector<float>> a;
  std::vector<std::unique_ptr<DeviceBuffer>> da, dc;
  for (unsigned i = 0; i < 2; ++i) {
    a.push_back(random(size_t(M * K), -1, 1, 10 + i));
    da.push_back(std::make_unique<DeviceBuffer>(m_api, a[i].size() * 2));
    dc.push_back(std::make_unique<DeviceBuffer>(m_api, size_t(M * N) * 2));
    da[i]->upload(bf16(a[i]));
  }
  for (int run = 0; run < 200; ++run) {
    const int i = run % 2;
    auto ok = gemm(*m_launcher, {M, N, K}, da[i]->ptr, dw.ptr, dc[i]->ptr, streams[i]);
    ASSERT_TRUE(ok) << ok.error().message;
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(m_api->cuStreamSynchronize(streams[i]), CUDA_SUCCESS);
    const auto ref = gemm_reference(a[size_t(i)], w, M, N, K);
    EXPECT_LT(rel_error(dc[size_t(i)]->download<std::uint16_t>(ref.size()), ref), 1e-2)
        << "stream " << i;
  }
  for (auto& st : streams) m_api->cuStreamDestroy(st);
}

// A split-K GEMM launched for the first time inside a CUDA graph capture in global mode (as
// torch.cuda.graph captures, on a non-blocking stream): the module load and the workspaces'
// allocation happen during the capture, the graph holds the kernel alone (no memset), and it
// replays correctly on new inputs, as does an eager launch on that stream after. (Such a first
// launch was refused, so ktune.torch ran torch's op inside every graph.)
TEST_F(KernelGpuTest, ASplitKGemmFirstLaunchedInsideAGraphCaptureReplaysCorrectly) {
  const std::int64_t M = 16, N = 4096, K = 4096;  // the heuristic splits K here (test above)
  CUstream s = nullptr;
  ASSERT_EQ(m_api->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto w = random(size_t(N * K), -1, 1, 2);
  DeviceBuffer dw(m_api, w.size() * 2), da(m_api, size_t(M * K) * 2), dc(m_api, size_t(M * N) * 2);
  dw.upload(bf16(w));
  ASSERT_EQ(m_api->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  auto ok = gemm(*m_launcher, {M, N, K}, da.ptr, dw.ptr, dc.ptr, s);
  CUgraph graph = nullptr;
  const CUresult ended = m_api->cuStreamEndCapture(s, &graph);
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_EQ(ended, CUDA_SUCCESS) << m_api->describe(ended);
  size_t nodes = 0;
  ASSERT_EQ(m_api->cuGraphGetNodes(graph, nullptr, &nodes), CUDA_SUCCESS);
  EXPECT_EQ(nodes, 1u) << "the graph holds the kernel alone";
  CUgraphExec exec = nullptr;
  ASSERT_EQ(m_api->cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  for (unsigned seed : {20u, 21u, 22u, 23u}) {
    const auto a = random(size_t(M * K), -1, 1, seed);
    da.upload(bf16(a));  // on the legacy stream, unordered with `s`:
    ASSERT_EQ(m_api->cuCtxSynchronize(), CUDA_SUCCESS);  // done before the replay reads it
    if (seed == 23u) {
      ok = gemm(*m_launcher, {M, N, K}, da.ptr, dw.ptr, dc.ptr, s);
      ASSERT_TRUE(ok) << ok.error().message;
    } else {
      ASSERT_EQ(m_api->cuGraphLaunch(exec, s), CUDA_SUCCESS);
    }
    ASSERT_EQ(m_api->cuStreamSynchronize(s), CUDA_SUCCESS);
    const auto ref = gemm_reference(a, w, M, N, K);
    EXPECT_LT(rel_error(dc.download<std::uint16_t>(ref.size()), ref), 1e-2)
        << (seed == 23u ? "the eager launch after the graph" : "replay with seed ") << seed;
  }
  m_api->cuGraphExecDestroy(exec);
  m_api->cuGraphDestroy(graph);
  m_api->cuStreamDestroy(s);
}

TEST_F(KernelGpuTest, RowOpsMatchTheHostReference) {
  const std::int64_t rows = 64, cols = 4096;
  const auto x = random(size_t(rows * cols), -3, 3, 3), g = random(size_t(cols), 0.5f, 1.5f, 4),
             b = random(size_t(cols), -0.5f, 0.5f, 5);
  DeviceBuffer dx(m_api, x.size() * 2), dg(m_api, g.size() * 2), db(m_api, b.size() * 2),
      dy(m_api, x.size() * 2);
  dx.upload(bf16(x));
  dg.upload(bf16(g));
  db.upload(bf16(b));
  std::vector<double> sm(x.size()), rms(x.size()), ln(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = &x[size_t(r * cols)];
    double mx = -INFINITY, sum = 0, sq = 0, mean = 0;
    for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(row[c])), mean += row[c];
    mean /= double(cols);
    double var = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      sum += std::exp(row[c] - mx);
      sq += double(row[c]) * row[c];
      var += (row[c] - mean) * (row[c] - mean);
    }
    var /= double(cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      sm[i] = std::exp(row[c] - mx) / sum;
      rms[i] = row[c] / std::sqrt(sq / double(cols) + 1e-6) * g[size_t(c)];
      ln[i] = (row[c] - mean) / std::sqrt(var + 1e-5) * g[size_t(c)] + b[size_t(c)];
    }
  }
  auto ok = softmax(*m_launcher, rows, cols, "bf16", dx.ptr, dy.ptr, m_stream);
  ASSERT_TRUE(ok) << ok.error().message;
  m_api->cuStreamSynchronize(m_stream);
  EXPECT_LT(rel_error(dy.download<std::uint16_t>(x.size()), sm), 1e-2);
  ok = rmsnorm(*m_launcher, rows, cols, "bf16", dx.ptr, dg.ptr, dy.ptr, 1e-6f, m_stream);
  ASSERT_TRUE(ok) << ok.error().message;
  m_api->cuStreamSynchronize(m_stream);
  EXPECT_LT(rel_error(dy.download<std::uint16_t>(x.size()), rms), 1e-2);
  ok = layernorm(*m_launcher, rows, cols, "bf16", dx.ptr, dg.ptr, db.ptr, dy.ptr, 1e-5f, m_stream);
  ASSERT_TRUE(ok) << ok.error().message;
  m_api->cuStreamSynchronize(m_stream);
  EXPECT_LT(rel_error(dy.download<std::uint16_t>(x.size()), ln), 1e-2);
}

// gemm_tma (sm_90a, A and B fed by TMA) asked by name through the kernel op and launched with
// ktune::Kernel, which encodes the two tensor maps from A's and B's addresses on every launch:
// an aligned shape and a tail shape (M, N not multiples of the tile; K % 8 == 0 for the 16-byte
// row stride TMA needs), a plain config, a 2-CTA cluster with B multicast and a staged
// epilogue, and (on a shape of more tiles than SMs) a persistent config whose epilogue stores C
// through a third map (tmC, encoded from C's address; N % 8 == 0 for its row stride). Then C = A
// W^T + 0.5 C through a beta override: the epilogues read C before they overwrite it.
TEST_F(KernelGpuTest, GemmTmaThroughClientTensorMapsMatchesTheHostReference) {
  CUdevice dev = 0;
  int major = 0, minor = 0;
  m_api->cuDeviceGet(&dev, 0);
  m_api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  m_api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (major * 10 + minor != 90) GTEST_SKIP() << "gemm_tma is sm_90a only";
  using Params = std::vector<std::pair<std::string, std::int64_t>>;
  const Params base = {{"BLOCK_M", 128},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 3},
                       {"CONSUMERS", 2},  {"GROUP_M", 1},   {"EPILOGUE", 0}, {"CLUSTER_M", 1},
                       {"PERSISTENT", 0}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
                       {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  Params cluster = base;
  for (auto& [n, v] : cluster) {
    if (n == "CLUSTER_M") v = 2;
    if (n == "BLOCK_N") v = 256;
    if (n == "EPILOGUE") v = 1;
    if (n == "STAGES") v = 2;
  }
  Params tma_store = base;
  for (auto& [n, v] : tma_store) {
    if (n == "EPILOGUE") v = 2;
    if (n == "PERSISTENT") v = 1;
    if (n == "STAGES") v = 4;
  }
  for (auto [M, N, K] :
       {std::array<std::int64_t, 3>{256, 512, 128}, {200, 300, 136}, {2200, 1000, 136}}) {
    const auto a = random(size_t(M * K), -1, 1, 7), w = random(size_t(N * K), -1, 1, 8);
    const auto ref = gemm_reference(a, w, M, N, K);
    DeviceBuffer da(m_api, a.size() * 2), dw(m_api, w.size() * 2), dc(m_api, size_t(M * N) * 2);
    da.upload(bf16(a));
    dw.upload(bf16(w));
    for (const Params* params : std::array<const Params*, 3>{&base, &cluster, &tma_store}) {
      // The persistent config on the shape of more tiles than SMs (a block stores one tile while
      // it computes the next); the others on the two small shapes.
      if ((params == &tma_store) != (M > 256)) continue;
      const std::string what = std::to_string(M) + "x" + std::to_string(N) + "x" +
                               std::to_string(K) +
                               (params == &base      ? " plain"
                                : params == &cluster ? " cluster"
                                                     : " tma-store");
      protocol::KernelRequest r;
      r.problem = {"gemm", "bf16", "", "rc", {{"M", M}, {"N", N}, {"K", K}}};
      r.template_name = "gemm_tma";
      r.params = *params;
      auto image = m_client->kernel(r);
      ASSERT_TRUE(image) << what << ": " << image.error().message;
      auto k = Kernel::create(std::move(*image));
      ASSERT_TRUE(k) << what << ": " << k.error().message;
      ASSERT_EQ((*k)->buffer_names(), (std::vector<std::string>{"A", "B", "C"})) << what;
      m_api->cuMemsetD8(dc.ptr, 0xff, dc.bytes);  // NaN in bf16: every element must be written
      for (int run = 0; run < 2; ++run) {
        auto ok = (*k)->launch({da.ptr, dw.ptr, dc.ptr}, m_stream);
        ASSERT_TRUE(ok) << what << ": " << ok.error().message;
      }
      ASSERT_EQ(m_api->cuStreamSynchronize(m_stream), CUDA_SUCCESS) << what;
      const auto c0 = dc.download<std::uint16_t>(ref.size());
      EXPECT_LT(rel_error(c0, ref), 1e-2) << what;
      // beta = 0.5: C = A W^T + 0.5 * (the C just computed).
      std::vector<double> ref_beta(ref.size());
      for (size_t i = 0; i < ref.size(); ++i) ref_beta[i] = ref[i] + 0.5 * double(from_bf16(c0[i]));
      const std::array<ScalarArg, 1> beta{ScalarArg{"beta", 0.5}};
      const std::array<std::uint64_t, 3> buffers{da.ptr, dw.ptr, dc.ptr};
      auto ok = (*k)->launch(buffers, m_stream, beta);
      ASSERT_TRUE(ok) << what << " beta: " << ok.error().message;
      ASSERT_EQ(m_api->cuStreamSynchronize(m_stream), CUDA_SUCCESS) << what;
      EXPECT_LT(rel_error(dc.download<std::uint16_t>(ref.size()), ref_beta), 1e-2)
          << what << " beta";
    }
  }
}

// A kernel served for another compute capability is refused at launch, before loading.
TEST_F(KernelGpuTest, ACubinForAnotherArchIsRefusedAtLaunch) {
  int major = 0;
  CUdevice dev = 0;
  m_api->cuDeviceGet(&dev, 0);
  m_api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  const std::string other =
      major == 8 ? "nvidia-h200.sm90.132sm.140gib" : "nvidia-a100-sxm4-80gb.sm80.108sm.80gib";
  Launcher foreign(*m_client, other);
  auto k = foreign.kernel({"softmax", "bf16", "", "", {{"rows", 64}, {"cols", 4096}}});
  ASSERT_TRUE(k) << k.error().message;
  DeviceBuffer dx(m_api, 64 * 4096 * 2), dy(m_api, 64 * 4096 * 2);
  auto r = (*k)->launch({dx.ptr, dy.ptr}, m_stream);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
  EXPECT_NE(r.error().message.find("but the current device 0 is sm_"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace ktune
