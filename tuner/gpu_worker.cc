#include "tuner/gpu_worker.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "config/text.h"
#include "tuner/device_kernels.h"

namespace ktune {
namespace {

constexpr int k_max_samples = 400;
constexpr int k_max_sets = 16;
constexpr size_t k_max_loaded = 64;
// Telemetry reads while timing: ~20 over a candidate's 100 ms, each a few NVML calls.
constexpr std::chrono::microseconds k_telemetry_period{5000};

int dtype_code(const std::string& d) {
  if (d == "bf16") return 0;
  if (d == "fp16") return 1;
  if (d == "fp32") return 2;
  return 3;  // i32
}

std::size_t element_bytes(const std::string& d) {
  return d == "bf16" || d == "fp16" ? 2 : 4;
}

WorkerJson error_reply(const std::string& message) {
  return {{"ok", false}, {"error", message}};
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double idx = p / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - double(lo));
}

Timing summarize(std::vector<double> us, bool graph) {
  std::sort(us.begin(), us.end());
  Timing t;
  t.samples = int(us.size());
  t.graph = graph;
  t.median_us = percentile(us, 50);
  t.p10_us = percentile(us, 10);
  t.p90_us = percentile(us, 90);
  return t;
}

bool is_resource_error(CUresult r) {
  return r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ||
         r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_HANDLE ||
         r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_CLUSTER_SIZE;
}

CUtensorMapDataType tensor_map_type(const std::string& dtype) {
  if (dtype == "bf16") return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  if (dtype == "fp16") return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (dtype == "fp32") return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  return CU_TENSOR_MAP_DATA_TYPE_INT32;
}

CUtensorMapSwizzle tensor_map_swizzle(TensorMapSwizzle s) {
  switch (s) {
    case TensorMapSwizzle::none:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
    case TensorMapSwizzle::b32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case TensorMapSwizzle::b64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case TensorMapSwizzle::b128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

CUtensorMapL2promotion tensor_map_l2(TensorMapL2Promotion p) {
  switch (p) {
    case TensorMapL2Promotion::none:
      return CU_TENSOR_MAP_L2_PROMOTION_NONE;
    case TensorMapL2Promotion::b64:
      return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case TensorMapL2Promotion::b128:
      return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case TensorMapL2Promotion::b256:
      return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  }
  return CU_TENSOR_MAP_L2_PROMOTION_NONE;
}

// "dims [4096, 1000] strides [8192] box [64, 128] swizzle 128B" for error messages.
std::string describe_map(const TensorMapValue& m) {
  auto list = [](const auto& v) {
    return "[" + joined(v, [](auto x) { return std::to_string(x); }) + "]";
  };
  return "dims " + list(m.dims) + " strides " + list(m.strides) + " box " + list(m.box) +
         " element_strides " + list(m.element_strides) + " swizzle " +
         std::string(to_string(m.swizzle));
}

// The launch configuration of cuLaunchKernelEx / cuOccupancyMaxActiveClusters for `g`, with its
// cluster dimension in `attr` (which must outlive the config).
CUlaunchConfig launch_config(const LaunchGeometry& g, CUstream stream, CUlaunchAttribute& attr) {
  attr = {};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = g.cluster[0];
  attr.value.clusterDim.y = g.cluster[1];
  attr.value.clusterDim.z = g.cluster[2];
  CUlaunchConfig c = {};
  c.gridDimX = g.grid[0];
  c.gridDimY = g.grid[1];
  c.gridDimZ = g.grid[2];
  c.blockDimX = g.block[0];
  c.blockDimY = g.block[1];
  c.blockDimZ = g.block[2];
  c.sharedMemBytes = g.smem;
  c.hStream = stream;
  c.attrs = &attr;
  c.numAttrs = 1;
  return c;
}

}  // namespace

// cuBLAS through dlopen (the reference for GEMM, and its baseline in ktune-bench).
struct GpuWorker::Cublas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*destroy)(Handle) = nullptr;
  int (*set_stream)(Handle, CUstream) = nullptr;
  int (*gemm_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*,
                 int, int, const void*, void*, int, int, int, int) = nullptr;
  Handle handle = nullptr;
  void* lib = nullptr;

  static Result<std::unique_ptr<Cublas>> load(CUstream stream) {
    auto c = std::make_unique<Cublas>();
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
      if ((c->lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!c->lib) return fail(ErrorCode::unavailable, std::string("no cuBLAS: ") + ::dlerror());
    c->create = reinterpret_cast<decltype(c->create)>(::dlsym(c->lib, "cublasCreate_v2"));
    c->destroy = reinterpret_cast<decltype(c->destroy)>(::dlsym(c->lib, "cublasDestroy_v2"));
    c->set_stream =
        reinterpret_cast<decltype(c->set_stream)>(::dlsym(c->lib, "cublasSetStream_v2"));
    c->gemm_ex = reinterpret_cast<decltype(c->gemm_ex)>(::dlsym(c->lib, "cublasGemmEx"));
    if (!c->create || !c->destroy || !c->set_stream || !c->gemm_ex)
      return fail(ErrorCode::unavailable, "cuBLAS lacks cublasGemmEx");
    if (int s = c->create(&c->handle); s != 0)
      return fail(ErrorCode::unavailable, "cublasCreate failed: " + std::to_string(s));
    c->set_stream(c->handle, stream);
    return c;
  }
  ~Cublas() {
    if (handle) destroy(handle);
  }
};

GpuWorker::GpuWorker(const CudaDriver& d) : m_d(d) {}

std::string GpuWorker::failure(CUresult r, const char* what) {
  if (is_sticky_cuda_error(r)) m_poisoned = true;
  return std::string(what) + ": " + m_d.describe(r);
}

Result<std::unique_ptr<GpuWorker>> GpuWorker::create(int ordinal) {
  auto d = CudaDriver::get();
  if (!d) return std::unexpected(d.error());
  std::unique_ptr<GpuWorker> w(new GpuWorker(**d));
  if (auto ok = w->init(ordinal); !ok) return std::unexpected(ok.error());
  return w;
}

Result<void> GpuWorker::init(int ordinal) {
  auto gpus = query_gpus();
  if (!gpus) return std::unexpected(gpus.error());
  if (ordinal < 0 || size_t(ordinal) >= gpus->size())
    return fail(ErrorCode::not_found, "no GPU " + std::to_string(ordinal));
  m_info = (*gpus)[size_t(ordinal)];
  auto check = [&](CUresult r, const char* what) -> Result<void> {
    if (r != CUDA_SUCCESS)
      return fail(ErrorCode::unavailable, std::string(what) + ": " + m_d.describe(r));
    return {};
  };
  if (auto ok = check(m_d.cuDeviceGet(&m_device, ordinal), "cuDeviceGet"); !ok) return ok;
  if (auto ok = check(m_d.cuDevicePrimaryCtxRetain(&m_ctx, m_device), "cuDevicePrimaryCtxRetain");
      !ok)
    return ok;
  if (auto ok = check(m_d.cuCtxSetCurrent(m_ctx), "cuCtxSetCurrent"); !ok) return ok;
  if (auto ok = check(m_d.cuStreamCreate(&m_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); !ok)
    return ok;
  for (int i = 0; i < 2 * k_max_samples + 2; ++i) {
    CUevent e = nullptr;
    if (auto ok = check(m_d.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"); !ok) return ok;
    m_events.push_back(e);
  }
  // The helper kernels, compiled for exactly this GPU.
  nvrtcProgram prog = nullptr;
  nvrtcCreateProgram(&prog, k_device_kernels_source, "ktune_worker_kernels.cu", 0, nullptr,
                     nullptr);
  const std::string arch = "--gpu-architecture=sm_" + std::to_string(m_info.device_class.cc);
  const char* opts[] = {arch.c_str(), "-std=c++17"};
  if (nvrtcCompileProgram(prog, 2, opts) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    return fail(ErrorCode::internal, "worker kernels failed to compile: " + log);
  }
  size_t size = 0;
  nvrtcGetCUBINSize(prog, &size);
  std::string cubin(size, '\0');
  nvrtcGetCUBIN(prog, cubin.data());
  nvrtcDestroyProgram(&prog);
  if (auto ok = check(m_d.cuModuleLoadData(&m_helpers, cubin.data()), "load worker kernels"); !ok)
    return ok;
  m_d.cuModuleGetFunction(&m_fill, m_helpers, "ktune_fill");
  m_d.cuModuleGetFunction(&m_poison, m_helpers, "ktune_poison");
  m_d.cuModuleGetFunction(&m_compare, m_helpers, "ktune_compare");
  m_d.cuModuleGetFunction(&m_clock_probe, m_helpers, "ktune_clock_probe");
  if (auto ok = check(m_d.cuMemAlloc(&m_acc, 3 * sizeof(double)), "cuMemAlloc"); !ok) return ok;
  if (auto ok = check(m_d.cuMemAlloc(&m_probe, 3 * sizeof(std::uint64_t)), "cuMemAlloc"); !ok)
    return ok;
  return {};
}

GpuWorker::~GpuWorker() {
  if (m_poisoned) return;  // the context is unusable; the process is about to exit anyway
  m_cublas.reset();
  for (auto& [_, l] : m_loaded) m_d.cuModuleUnload(l.module);
  (void)free_buffers();
  if (m_acc) m_d.cuMemFree(m_acc);
  if (m_probe) m_d.cuMemFree(m_probe);
  if (m_flush) m_d.cuMemFree(m_flush);
  for (CUevent e : m_events) m_d.cuEventDestroy(e);
  if (m_helpers) m_d.cuModuleUnload(m_helpers);
  if (m_stream) m_d.cuStreamDestroy(m_stream);
  if (m_ctx) m_d.cuDevicePrimaryCtxRelease(m_device);
}

GpuTelemetry GpuWorker::telemetry() const {
  auto nvml = Nvml::get();
  if (!nvml) return {};
  auto t = (*nvml)->telemetry(m_info.pci_bus_id);
  return t ? *t : GpuTelemetry{};
}

int GpuWorker::counted_sm_clock_mhz() {
  if (!m_clock_probe || !m_probe) return 0;
  CUdeviceptr out = m_probe;
  unsigned long long window_ns = 100'000;
  void* params[] = {&out, &window_ns};
  if (m_d.cuLaunchKernel(m_clock_probe, 1, 1, 1, 1, 1, 1, 0, m_stream, params, nullptr) !=
          CUDA_SUCCESS ||
      m_d.cuStreamSynchronize(m_stream) != CUDA_SUCCESS)
    return 0;
  std::uint64_t counts[3] = {0, 0, 0};
  if (m_d.cuMemcpyDtoH(counts, m_probe, sizeof counts) != CUDA_SUCCESS || counts[0] == 0) return 0;
  return int(std::lround(double(counts[1]) * 1e3 / double(counts[0])));
}

TelemetryWindow::Source GpuWorker::telemetry_source() const {
  auto nvml = Nvml::get();
  if (!nvml) return {};
  return [nvml = *nvml, pci = m_info.pci_bus_id]() -> std::optional<GpuTelemetry> {
    auto t = nvml->telemetry(pci);
    return t ? std::optional(*t) : std::nullopt;
  };
}

WorkerJson GpuWorker::handle(const WorkerFrame& request, bool& exit_after) {
  const std::string op = request.header.value("op", "");
  WorkerJson reply;
  try {
    if (op == "hello")
      reply = hello();
    else if (op == "setup")
      reply = setup(request.header);
    else if (op == "reference")
      reply = reference(request);
    else if (op == "trial")
      reply = trial(request);
    else if (op == "retime")
      reply = retime(request.header);
    else if (op == "time_cublas")
      reply = time_cublas(request.header);
    else if (op == "time_copy")
      reply = time_copy(request.header);
    else if (op == "occupancy")
      reply = occupancy(request);
    else
      reply = error_reply("unknown worker op '" + op + "'");
  } catch (const std::exception& e) {
    reply = error_reply(std::string("malformed request: ") + e.what());
  }
  exit_after = m_poisoned;
  if (m_poisoned) reply["poisoned"] = true;
  return reply;
}

WorkerJson GpuWorker::hello() {
  return {{"ok", true},
          {"protocol", k_worker_protocol_version},
          {"pid", ::getpid()},
          {"device",
           {{"name", m_info.device_class.name},
            {"cc", m_info.device_class.cc},
            {"sm_count", m_info.device_class.sm_count},
            {"memory_gib", m_info.device_class.memory_gib}}},
          {"limits",
           {{"max_threads_per_block", m_info.limits.max_threads_per_block},
            {"max_smem_per_block", m_info.limits.max_smem_per_block},
            {"max_regs_per_block", m_info.limits.max_regs_per_block},
            {"l2_bytes", m_info.limits.l2_bytes}}},
          {"pci_bus_id", m_info.pci_bus_id},
          {"driver_cuda_version", m_info.driver_cuda_version},
          {"telemetry", to_json(telemetry())}};
}

Result<CUdeviceptr> GpuWorker::alloc(std::size_t bytes) {
  CUdeviceptr p = 0;
  if (CUresult r = m_d.cuMemAlloc(&p, std::max<std::size_t>(bytes, 16)); r != CUDA_SUCCESS)
    return fail(ErrorCode::unavailable, failure(r, "cuMemAlloc"));
  return p;
}

Result<void> GpuWorker::free_buffers() {
  for (auto& b : m_buffers) {
    for (auto p : b.sets) m_d.cuMemFree(p);
    for (auto p : b.pristine) m_d.cuMemFree(p);
  }
  m_buffers.clear();
  for (auto& [_, refs] : m_refs)
    for (auto& [__, p] : refs) m_d.cuMemFree(p);
  m_refs.clear();
  return {};
}

Result<void> GpuWorker::launch_helper(CUfunction f, unsigned long long n, unsigned max_blocks,
                                      void** params, const char* what) {
  const unsigned blocks = unsigned(std::clamp<unsigned long long>((n + 255) / 256, 1, max_blocks));
  if (CUresult r = m_d.cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, m_stream, params, nullptr);
      r != CUDA_SUCCESS)
    return fail(ErrorCode::internal, failure(r, what));
  return {};
}

Result<void> GpuWorker::fill(CUdeviceptr p, const ArgValue& spec, unsigned seed) {
  unsigned long long n = (unsigned long long)spec.count;
  int dtype = dtype_code(spec.dtype), kind = spec.init.kind == InitSpec::Kind::uniform ? 0 : 1;
  float a = float(spec.init.a), b = float(spec.init.b);
  void* params[] = {&p, &n, &dtype, &seed, &kind, &a, &b};
  return launch_helper(m_fill, n, 4096, params, "fill");
}

Result<void> GpuWorker::poison(CUdeviceptr p, const ArgValue& spec) {
  unsigned long long n = (unsigned long long)spec.count;
  int dtype = dtype_code(spec.dtype);
  void* params[] = {&p, &n, &dtype};
  return launch_helper(m_poison, n, 4096, params, "poison");
}

GpuWorker::Buffer* GpuWorker::buffer(const std::string& name) {
  for (auto& b : m_buffers)
    if (b.spec.name == name) return &b;
  return nullptr;
}

WorkerJson GpuWorker::setup(const WorkerJson& req) {
  (void)free_buffers();
  m_tensor_maps.clear();
  for (auto& [_, l] : m_loaded) m_d.cuModuleUnload(l.module);
  m_loaded.clear();
  m_seed = req.value("seed", 1u);
  std::vector<ArgValue> args;
  for (const auto& a : req.at("args")) {
    auto arg = arg_from_json(a);
    if (!arg) return error_reply(arg.error().message);
    args.push_back(std::move(*arg));
  }
  // Enough input sets that rotating through them keeps the inputs out of L2 (3x its size), as
  // far as half the free memory allows.
  std::size_t in_bytes = 0, other_bytes = 0;
  for (const auto& a : args) {
    if (!a.is_buffer()) continue;
    const std::size_t bytes = std::size_t(a.count) * element_bytes(a.dtype);
    (a.role == BufferRole::in || a.role == BufferRole::inout ? in_bytes : other_bytes) += bytes;
  }
  std::size_t free_mem = 0, total_mem = 0;
  m_d.cuMemGetInfo(&free_mem, &total_mem);
  const double l2 = double(m_info.limits.l2_bytes);
  m_sets = in_bytes == 0
               ? 1
               : int(std::clamp(std::ceil(3 * l2 / double(in_bytes)), 1.0, double(k_max_sets)));
  if (req.contains("sets")) m_sets = std::clamp(req["sets"].get<int>(), 1, k_max_sets);
  while (m_sets > 1 &&
         double(m_sets) * double(in_bytes) * 1.5 + double(other_bytes) * 3 > 0.5 * double(free_mem))
    --m_sets;
  if (double(in_bytes) * 1.5 + double(other_bytes) * 3 > 0.8 * double(free_mem))
    return error_reply("problem needs more GPU memory than is free (" +
                       std::to_string(free_mem >> 20) + " MiB)");

  for (const auto& a : args) {
    if (!a.is_buffer()) continue;
    Buffer b;
    b.spec = a;
    b.bytes = std::size_t(a.count) * element_bytes(a.dtype);
    const bool input = a.role == BufferRole::in || a.role == BufferRole::inout;
    for (int s = 0; s < (input ? m_sets : 1); ++s) {
      auto p = alloc(b.bytes);
      if (!p) return error_reply(p.error().message);
      b.sets.push_back(*p);
      if (input) {
        const unsigned seed =
            m_seed * 7919u + unsigned(s) * 104729u + unsigned(m_buffers.size()) * 15485863u;
        if (auto ok = fill(*p, a, seed); !ok) return error_reply(ok.error().message);
      }
      if (a.role == BufferRole::inout) {
        auto copy = alloc(b.bytes);
        if (!copy) return error_reply(copy.error().message);
        m_d.cuMemcpyDtoDAsync(*copy, *p, b.bytes, m_stream);
        b.pristine.push_back(*copy);
      }
      if (a.role == BufferRole::workspace) m_d.cuMemsetD8Async(*p, 0, b.bytes, m_stream);
    }
    m_buffers.push_back(std::move(b));
  }
  if (CUresult r = m_d.cuStreamSynchronize(m_stream); r != CUDA_SUCCESS)
    return error_reply(failure(r, "setup"));
  return {{"ok", true},
          {"sets", m_sets},
          {"input_bytes_per_set", in_bytes},
          {"free_mem_mib", free_mem >> 20}};
}

Result<void> GpuWorker::ensure_capacity(const std::vector<ArgValue>& args) {
  for (const auto& a : args) {
    if (!a.is_buffer()) continue;
    Buffer* b = buffer(a.name);
    if (!b) return fail(ErrorCode::invalid_argument, "argument '" + a.name + "' was not set up");
    const std::size_t need = std::size_t(a.count) * element_bytes(a.dtype);
    if (need <= b->bytes) continue;
    if (a.role != BufferRole::workspace && a.role != BufferRole::out)
      return fail(ErrorCode::invalid_argument, "input '" + a.name + "' is larger than at setup");
    for (auto p : b->sets) m_d.cuMemFree(p);
    b->sets.clear();
    auto p = alloc(need);
    if (!p) return std::unexpected(p.error());
    b->sets.push_back(*p);
    b->bytes = need;
    b->spec.count = a.count;
    m_d.cuMemsetD8Async(*p, 0, need, m_stream);
  }
  return {};
}

Result<void> GpuWorker::prepare_verification(const std::vector<ArgValue>& args, int set) {
  for (const auto& a : args) {
    if (!a.is_buffer()) continue;
    Buffer* b = buffer(a.name);
    if (a.role == BufferRole::out) {
      ArgValue whole = b->spec;
      whole.count = std::int64_t(b->bytes / element_bytes(b->spec.dtype));
      if (auto ok = poison(b->sets[0], whole); !ok) return ok;
    } else if (a.role == BufferRole::inout) {
      m_d.cuMemcpyDtoDAsync(b->sets[size_t(set)], b->pristine[size_t(set)], b->bytes, m_stream);
    } else if (a.role == BufferRole::workspace) {
      m_d.cuMemsetD8Async(b->sets[0], 0, b->bytes, m_stream);
    }
  }
  return {};
}

Result<const CUtensorMap*> GpuWorker::tensor_map(const ArgValue& a, int set) {
  Buffer* b = buffer(a.map.buffer);
  if (!b)
    return fail(ErrorCode::invalid_argument,
                "tensor map '" + a.name + "': buffer '" + a.map.buffer + "' was not set up");
  const bool input = b->spec.role == BufferRole::in || b->spec.role == BufferRole::inout;
  const CUdeviceptr base = b->sets[input ? size_t(set) % b->sets.size() : 0];
  TensorMapKey key{base,
                   a.dtype,
                   a.map.dims,
                   a.map.strides,
                   a.map.box,
                   a.map.element_strides,
                   int(a.map.swizzle),
                   int(a.map.l2_promotion),
                   int(a.map.oob_fill)};
  if (auto it = m_tensor_maps.find(key); it != m_tensor_maps.end()) return &it->second;
  if (!m_d.cuTensorMapEncodeTiled)
    return fail(ErrorCode::unavailable, "the CUDA driver has no cuTensorMapEncodeTiled");
  // The map must not reach past the buffer (TMA would read or write outside the allocation).
  const std::size_t rank = a.map.dims.size();
  const std::size_t span =
      rank == 1 ? a.map.dims[0] * element_bytes(a.dtype) : a.map.strides[rank - 2] * a.map.dims[rank - 1];
  if (span > b->bytes)
    return fail(ErrorCode::invalid_argument,
                "tensor map '" + a.name + "' spans " + std::to_string(span) + " bytes but '" +
                    b->spec.name + "' holds " + std::to_string(b->bytes));
  CUtensorMap map;
  const CUresult r = m_d.cuTensorMapEncodeTiled(
      &map, tensor_map_type(a.dtype), cuuint32_t(rank), reinterpret_cast<void*>(base),
      a.map.dims.data(), a.map.strides.data(), a.map.box.data(), a.map.element_strides.data(),
      CU_TENSOR_MAP_INTERLEAVE_NONE, tensor_map_swizzle(a.map.swizzle),
      tensor_map_l2(a.map.l2_promotion),
      a.map.oob_fill == TensorMapOobFill::nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                              : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return fail(ErrorCode::invalid_argument, "cuTensorMapEncodeTiled refused '" + a.name + "' (" +
                                                 a.dtype + ", " + describe_map(a.map) +
                                                 "): " + failure(r, "encode"));
  return &m_tensor_maps.emplace(std::move(key), map).first->second;
}

Result<void> GpuWorker::encode_tensor_maps(const std::vector<ArgValue>& args) {
  if (m_tensor_maps.size() > 4096) m_tensor_maps.clear();  // no launch holds a pointer now
  for (const auto& a : args) {
    if (a.kind != ArgKind::tensor_map) continue;
    for (int set = 0; set < m_sets; ++set)
      if (auto m = tensor_map(a, set); !m) return std::unexpected(m.error());
  }
  return {};
}

CUresult GpuWorker::launch_kernel(CUfunction f, const LaunchGeometry& g,
                                  const std::vector<ArgValue>& args, int set) {
  // Argument storage for this launch: pointers and scalars, one slot each; a tensor map's
  // parameter is its encoded map in the cache (128 bytes, passed by value). Buffers that are
  // not passed (reached through a map) take no parameter.
  std::vector<std::uint64_t> storage(args.size());
  std::vector<void*> params;
  params.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgValue& a = args[i];
    if (a.kind == ArgKind::tensor_map) {
      auto map = tensor_map(a, set);
      if (!map) return CUDA_ERROR_INVALID_VALUE;  // a trial encodes every map before launching
      params.push_back(const_cast<CUtensorMap*>(*map));
      continue;
    }
    if (a.is_buffer()) {
      if (!a.pass) continue;
      Buffer* b = buffer(a.name);
      const bool input = a.role == BufferRole::in || a.role == BufferRole::inout;
      storage[i] = b->sets[input ? size_t(set) % b->sets.size() : 0];
    } else if (a.scalar == ScalarType::i32) {
      const std::int32_t v = std::int32_t(a.value);
      std::memcpy(&storage[i], &v, sizeof v);
    } else if (a.scalar == ScalarType::i64) {
      const std::int64_t v = std::int64_t(a.value);
      std::memcpy(&storage[i], &v, sizeof v);
    } else {
      const float v = float(a.value);
      std::memcpy(&storage[i], &v, sizeof v);
    }
    params.push_back(&storage[i]);
  }
  if (g.cluster_size() == 1)
    return m_d.cuLaunchKernel(f, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1],
                              g.block[2], g.smem, m_stream, params.data(), nullptr);
  if (!m_d.cuLaunchKernelEx) return CUDA_ERROR_NOT_SUPPORTED;
  CUlaunchAttribute attr;
  const CUlaunchConfig config = launch_config(g, m_stream, attr);
  return m_d.cuLaunchKernelEx(&config, f, params.data(), nullptr);
}

std::vector<int> GpuWorker::verify_sets() const {
  if (m_sets == 1) return {0};
  return {0, m_sets - 1};
}

Result<double> GpuWorker::compare_outputs(const std::vector<ArgValue>& args, int set,
                                          std::string& why) {
  double worst = 0;
  for (const auto& a : args) {
    if (!a.is_buffer() || (a.role != BufferRole::out && a.role != BufferRole::inout)) continue;
    Buffer* b = buffer(a.name);
    auto ref = m_refs[set].find(a.name);
    if (ref == m_refs[set].end())
      return fail(ErrorCode::invalid_argument, "no reference for '" + a.name + "'");
    m_d.cuMemsetD8Async(m_acc, 0, 3 * sizeof(double), m_stream);
    CUdeviceptr out = b->sets[a.role == BufferRole::inout ? size_t(set) : 0], refp = ref->second,
                acc = m_acc;
    unsigned long long n = (unsigned long long)a.count;
    int dtype = dtype_code(a.dtype);
    void* params[] = {&out, &refp, &n, &dtype, &acc};
    if (auto ok = launch_helper(m_compare, n, 1024, params, "compare"); !ok)
      return std::unexpected(ok.error());
    double acc_host[3] = {};
    if (CUresult r = m_d.cuStreamSynchronize(m_stream); r != CUDA_SUCCESS)
      return fail(ErrorCode::internal, failure(r, "compare"));
    m_d.cuMemcpyDtoH(acc_host, m_acc, sizeof acc_host);
    if (acc_host[2] > 0) {
      why = a.name + ": " + std::to_string(std::int64_t(acc_host[2])) + " of " + std::to_string(n) +
            " elements NaN/inf or never written";
      return std::numeric_limits<double>::infinity();
    }
    const double rel =
        acc_host[1] > 0 ? std::sqrt(acc_host[0] / acc_host[1]) : std::sqrt(acc_host[0]);
    if (rel > worst) {
      worst = rel;
      why = a.name;
    }
  }
  return worst;
}

GpuWorker::Measured GpuWorker::measure(const LaunchFn& launch, const TimingOptions& o) {
  auto elapsed_us = [&](CUevent a, CUevent b) {
    float ms = 0;
    m_d.cuEventElapsedTime(&ms, a, b);
    return double(ms) * 1000.0;
  };
  TelemetryWindow window(telemetry_source(), k_telemetry_period);
  // The reads of the GPU time between the first timed event and the last, which ended when the
  // synchronize returned; a single read after them when the window caught none.
  auto measured = [&](Timing timing, int events) {
    const double span_us = elapsed_us(m_events[0], m_events[size_t(events - 1)]);
    const int counted = counted_sm_clock_mhz();  // first: the clock closest to the timing's end
    GpuTelemetry t = window.close(std::chrono::microseconds(std::int64_t(span_us)));
    if (t.samples == 0) t = telemetry();
    t.sm_clock_counted_mhz = counted;
    return Measured{CUDA_SUCCESS, std::move(timing), t};
  };
  CUresult r;
  // One timed run to size the warm-up and the sampling.
  m_d.cuEventRecord(m_events[0], m_stream);
  if ((r = launch(0)) != CUDA_SUCCESS) return {r, {}, {}};
  m_d.cuEventRecord(m_events[1], m_stream);
  if ((r = m_d.cuEventSynchronize(m_events[1])) != CUDA_SUCCESS) return {r, {}, {}};
  const double estimate = std::max(0.5, elapsed_us(m_events[0], m_events[1]));
  const int warmup = int(std::clamp(o.warmup_ms * 1000 / estimate, 2.0, 2000.0));
  for (int i = 0; i < warmup; ++i)
    if ((r = launch(i % m_sets)) != CUDA_SUCCESS) return {r, {}, {}};

  std::vector<double> samples;
  const bool flush = o.l2 == TimingL2::flushed;
  if (flush && !m_flush) {
    // 2x L2, written (not read) before each timed launch: what triton.testing.do_bench does with
    // its 256 MB buffer, sized to this GPU. Lines the flush leaves dirty are the kernel's to evict.
    m_flush_bytes = std::max<std::size_t>(2 * m_info.limits.l2_bytes, 8u << 20);
    if ((r = m_d.cuMemAlloc(&m_flush, m_flush_bytes)) != CUDA_SUCCESS) return {r, {}, {}};
  }
  if (!flush && estimate < o.graph_below_us) {
    // Short kernels: a graph of G launches amortizes the launch gap that events would measure.
    const int per_graph = int(std::clamp(200.0 / estimate, 4.0, 500.0));
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    if ((r = m_d.cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) !=
        CUDA_SUCCESS)
      return {r, {}, {}};
    for (int i = 0; i < per_graph; ++i)
      if ((r = launch(i % m_sets)) != CUDA_SUCCESS) break;
    CUresult end = m_d.cuStreamEndCapture(m_stream, &graph);
    if (r != CUDA_SUCCESS || end != CUDA_SUCCESS) return {r != CUDA_SUCCESS ? r : end, {}, {}};
    if ((r = m_d.cuGraphInstantiate(&exec, graph, 0)) != CUDA_SUCCESS) {
      m_d.cuGraphDestroy(graph);
      return {r, {}, {}};
    }
    m_d.cuGraphLaunch(exec, m_stream);  // warm the graph itself
    const int n = int(std::clamp(o.target_ms * 1000 / (per_graph * estimate), double(o.min_samples),
                                 double(std::min(o.max_samples, k_max_samples))));
    for (int i = 0; i < n; ++i) {
      m_d.cuEventRecord(m_events[size_t(2 * i)], m_stream);
      m_d.cuGraphLaunch(exec, m_stream);
      m_d.cuEventRecord(m_events[size_t(2 * i + 1)], m_stream);
    }
    r = m_d.cuStreamSynchronize(m_stream);
    if (r == CUDA_SUCCESS)
      for (int i = 0; i < n; ++i)
        samples.push_back(elapsed_us(m_events[size_t(2 * i)], m_events[size_t(2 * i + 1)]) /
                          per_graph);
    m_d.cuGraphExecDestroy(exec);
    m_d.cuGraphDestroy(graph);
    if (r != CUDA_SUCCESS) return {r, {}, {}};
    return measured(summarize(std::move(samples), true), 2 * n);
  }
  const int n = int(std::clamp(o.target_ms * 1000 / estimate, double(o.min_samples),
                               double(std::min(o.max_samples, k_max_samples))));
  for (int i = 0; i < n; ++i) {
    if (flush) m_d.cuMemsetD32Async(m_flush, 0, m_flush_bytes / 4, m_stream);
    m_d.cuEventRecord(m_events[size_t(2 * i)], m_stream);
    if ((r = launch(i % m_sets)) != CUDA_SUCCESS) return {r, {}, {}};
    m_d.cuEventRecord(m_events[size_t(2 * i + 1)], m_stream);
  }
  if ((r = m_d.cuStreamSynchronize(m_stream)) != CUDA_SUCCESS) return {r, {}, {}};
  for (int i = 0; i < n; ++i)
    samples.push_back(elapsed_us(m_events[size_t(2 * i)], m_events[size_t(2 * i + 1)]));
  return measured(summarize(std::move(samples), false), 2 * n);
}

WorkerJson GpuWorker::reference(const WorkerFrame& req) {
  const WorkerJson& h = req.header;
  const std::string kind = h.at("kind").get<std::string>();
  std::vector<ArgValue> args;
  for (const auto& a : h.at("args")) args.push_back(*arg_from_json(a));
  if (auto ok = ensure_capacity(args); !ok) return error_reply(ok.error().message);
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  LaunchGeometry geometry;
  if (kind == "kernel") {
    if (CUresult r = m_d.cuModuleLoadData(&module, req.blob.data()); r != CUDA_SUCCESS)
      return error_reply(failure(r, "load reference"));
    if (CUresult r =
            m_d.cuModuleGetFunction(&fn, module, h.at("lowered_name").get<std::string>().c_str());
        r != CUDA_SUCCESS)
      return error_reply(failure(r, "reference function"));
    geometry = launch_from_json(h.at("launch"));
    if (geometry.smem > 48 * 1024)
      m_d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             int(geometry.smem));
    if (auto ok = encode_tensor_maps(args); !ok) {
      m_d.cuModuleUnload(module);
      return error_reply("reference: " + ok.error().message);
    }
  } else if (kind == "cublas_gemm") {
    if (!m_cublas) {
      auto c = Cublas::load(m_stream);
      if (!c) return error_reply(c.error().message);
      m_cublas = std::move(*c);
    }
  } else {
    return error_reply("unknown reference kind '" + kind + "'");
  }
  for (auto& [_, refs] : m_refs)
    for (auto& [__, p] : refs) m_d.cuMemFree(p);
  m_refs.clear();
  for (int set : verify_sets()) {
    if (auto ok = prepare_verification(args, set); !ok) return error_reply(ok.error().message);
    CUresult r = kind == "kernel" ? launch_kernel(fn, geometry, args, set)
                                  : launch_cublas(h.at("problem"), set, 0);
    if (r == CUDA_SUCCESS) r = m_d.cuStreamSynchronize(m_stream);
    if (r != CUDA_SUCCESS) {
      if (module) m_d.cuModuleUnload(module);
      return error_reply(failure(r, "reference run"));
    }
    for (const auto& a : args) {
      if (!a.is_buffer() || (a.role != BufferRole::out && a.role != BufferRole::inout)) continue;
      Buffer* b = buffer(a.name);
      const std::size_t bytes = std::size_t(a.count) * element_bytes(a.dtype);
      auto copy = alloc(bytes);
      if (!copy) return error_reply(copy.error().message);
      m_d.cuMemcpyDtoDAsync(*copy, b->sets[a.role == BufferRole::inout ? size_t(set) : 0], bytes,
                            m_stream);
      m_refs[set][a.name] = *copy;
    }
  }
  m_d.cuStreamSynchronize(m_stream);
  if (module) m_d.cuModuleUnload(module);
  return {{"ok", true}, {"sets", m_sets}};
}

CUresult GpuWorker::launch_cublas(const WorkerJson& p, int set, CUdeviceptr out_override) {
  const int M = p.at("M").get<int>(), N = p.at("N").get<int>(), K = p.at("K").get<int>();
  const std::string layout = p.at("layout").get<std::string>();
  auto type_of = [](const std::string& d) { return d == "bf16" ? 14 : d == "fp16" ? 2 : 0; };
  const int tin = type_of(p.at("dtype").get<std::string>()),
            tout = type_of(p.at("out_dtype").get<std::string>());
  Buffer *A = buffer("A"), *B = buffer("B"), *C = buffer("C");
  if (!A || !B || !C) return CUDA_ERROR_INVALID_VALUE;
  const bool a_row = layout.size() == 2 && layout[0] == 'r',
             b_row = layout.size() == 2 && layout[1] == 'r';
  // Row-major C (MxN) = A B is column-major C^T (NxM) = B^T A^T: cuBLAS computes with m=N, n=M.
  const int op_b = b_row ? 0 : 1, ldb = b_row ? N : K;
  const int op_a = a_row ? 0 : 1, lda = a_row ? K : M;
  const float alpha = float(p.value("alpha", 1.0)), beta = float(p.value("beta", 0.0));
  const CUdeviceptr a = A->sets[size_t(set) % A->sets.size()],
                    b = B->sets[size_t(set) % B->sets.size()];
  const CUdeviceptr c = out_override ? out_override : C->sets[0];
  const int status = m_cublas->gemm_ex(
      m_cublas->handle, op_b, op_a, N, M, K, &alpha, reinterpret_cast<void*>(b), tin, ldb,
      reinterpret_cast<void*>(a), tin, lda, &beta, reinterpret_cast<void*>(c), tout, N,
      68 /* CUBLAS_COMPUTE_32F */, -1 /* CUBLAS_GEMM_DEFAULT */);
  return status == 0 ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

WorkerJson GpuWorker::trial(const WorkerFrame& req) {
  auto parsed = trial_request_from_json(req.header);
  if (!parsed) return error_reply(parsed.error().message);
  TrialRequest& t = *parsed;
  TrialResult result;
  result.id = t.id;
  auto reply = [&]() {
    WorkerJson j = to_json(result);
    j["ok"] = true;
    return j;
  };
  auto outcome = [&](Outcome o, std::string message) {
    result.outcome = o;
    result.message = std::move(message);
    return reply();
  };
  if (auto ok = ensure_capacity(t.args); !ok)
    return outcome(Outcome::resource_error, ok.error().message);

  Loaded loaded;
  loaded.request = t;
  if (CUresult r = m_d.cuModuleLoadData(&loaded.module, req.blob.data()); r != CUDA_SUCCESS)
    return outcome(m_poisoned ? Outcome::crash : Outcome::compile_error,
                   failure(r, "cuModuleLoadData"));
  auto unload = [&] {
    if (loaded.module && !m_poisoned) m_d.cuModuleUnload(loaded.module);
    loaded.module = nullptr;
  };
  if (CUresult r = m_d.cuModuleGetFunction(&loaded.function, loaded.module, t.lowered_name.c_str());
      r != CUDA_SUCCESS) {
    unload();
    return outcome(Outcome::compile_error, failure(r, "cuModuleGetFunction"));
  }
  if (t.launch.smem > 48 * 1024)
    if (CUresult r = m_d.cuFuncSetAttribute(
            loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(t.launch.smem));
        r != CUDA_SUCCESS) {
      unload();
      return outcome(Outcome::resource_error, failure(r, "shared memory request refused"));
    }
  if (t.launch.cluster_size() > 1 && !m_d.cuLaunchKernelEx) {
    unload();
    return outcome(Outcome::resource_error, "the CUDA driver has no cuLaunchKernelEx (clusters)");
  }
  // A tensor map the driver refuses to encode is the config's fault: invalid, not an error.
  if (auto ok = encode_tensor_maps(t.args); !ok) {
    unload();
    return outcome(ok.error().code == ErrorCode::invalid_argument ? Outcome::invalid
                                                                  : Outcome::resource_error,
                   ok.error().message);
  }

  // Verify on fresh random inputs against the reference, with poisoned outputs.
  if (t.verify) {
    for (int set : verify_sets()) {
      if (auto ok = prepare_verification(t.args, set); !ok) {
        unload();
        return outcome(m_poisoned ? Outcome::crash : Outcome::resource_error, ok.error().message);
      }
      CUresult r = launch_kernel(loaded.function, t.launch, t.args, set);
      if (r != CUDA_SUCCESS) {
        unload();
        return outcome(
            is_resource_error(r) && !m_poisoned ? Outcome::resource_error : Outcome::crash,
            failure(r, "launch"));
      }
      if ((r = m_d.cuStreamSynchronize(m_stream)) != CUDA_SUCCESS) {
        unload();
        return outcome(
            m_poisoned || is_sticky_cuda_error(r) ? Outcome::crash : Outcome::resource_error,
            failure(r, "kernel execution"));
      }
      std::string why;
      auto err = compare_outputs(t.args, set, why);
      if (!err) {
        unload();
        return outcome(m_poisoned ? Outcome::crash : Outcome::wrong_result, err.error().message);
      }
      result.ref_error = std::max(result.ref_error, *err);
      if (!(*err <= t.tolerance)) {
        unload();
        char buf[160];
        std::snprintf(buf, sizeof buf, "relative error %.3g > tolerance %.3g (%s)", *err,
                      t.tolerance, why.c_str());
        return outcome(Outcome::wrong_result, buf);
      }
    }
  }

  Measured m = measure(
      [&](int set) { return launch_kernel(loaded.function, t.launch, t.args, set); }, t.timing);
  if (CUresult r = m.status; r != CUDA_SUCCESS) {
    unload();
    return outcome(is_sticky_cuda_error(r) || m_poisoned ? Outcome::crash : Outcome::resource_error,
                   failure(r, "timing"));
  }
  result.timing = m.timing;
  result.telemetry = m.telemetry;
  // Keep the module for interleaved re-timing of finalists; evict the least recently used.
  if (auto it = m_loaded.find(t.id); it != m_loaded.end()) {
    m_d.cuModuleUnload(it->second.module);
    m_loaded.erase(it);
  }
  if (m_loaded.size() >= k_max_loaded) {
    auto oldest = std::min_element(
        m_loaded.begin(), m_loaded.end(),
        [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
    m_d.cuModuleUnload(oldest->second.module);
    m_loaded.erase(oldest);
  }
  loaded.last_used = ++m_use_clock;
  m_loaded.emplace(t.id, loaded);
  return reply();
}

WorkerJson GpuWorker::retime(const WorkerJson& req) {
  const auto ids = req.at("ids").get<std::vector<std::uint64_t>>();
  const int rounds = std::max(1, req.value("rounds", 5));
  TimingOptions o = timing_options_from_json(req.value("timing", WorkerJson::object()));
  o.target_ms /= rounds;
  o.min_samples = std::max(3, o.min_samples / rounds);
  o.warmup_ms = 2;
  std::map<std::uint64_t, std::vector<double>> medians;
  std::vector<GpuTelemetry> windows;
  const bool with_cublas = req.contains("cublas");
  for (int round = 0; round < rounds; ++round) {
    // Rotate the order each round so no candidate always runs first (thermal drift).
    for (size_t k = 0; k < ids.size() + (with_cublas ? 1 : 0); ++k) {
      const size_t i = (k + size_t(round)) % (ids.size() + (with_cublas ? 1 : 0));
      Measured m;
      std::uint64_t id;
      if (i == ids.size()) {
        id = ~0ull;
        m = measure([&](int set) { return launch_cublas(req["cublas"], set, 0); }, o);
      } else {
        id = ids[i];
        auto it = m_loaded.find(id);
        if (it == m_loaded.end())
          return error_reply("retime: trial " + std::to_string(id) + " is not loaded");
        it->second.last_used = ++m_use_clock;
        const Loaded& l = it->second;
        m = measure(
            [&](int set) {
              return launch_kernel(l.function, l.request.launch, l.request.args, set);
            },
            o);
      }
      if (m.status != CUDA_SUCCESS) return error_reply(failure(m.status, "retime"));
      medians[id].push_back(m.timing.median_us);
      windows.push_back(m.telemetry);
    }
  }
  WorkerJson times = WorkerJson::array();
  for (auto& [id, v] : medians) {
    Timing t = summarize(v, false);
    WorkerJson j = to_json(t);
    j["id"] = id == ~0ull ? WorkerJson("cublas") : WorkerJson(id);
    times.push_back(j);
  }
  return {{"ok", true}, {"times", times}, {"telemetry", to_json(summarize_telemetry(windows))}};
}

WorkerJson GpuWorker::time_cublas(const WorkerJson& req) {
  if (!m_cublas) {
    auto c = Cublas::load(m_stream);
    if (!c) return error_reply(c.error().message);
    m_cublas = std::move(*c);
  }
  const WorkerJson problem = req.at("problem");
  Measured m = measure([&](int set) { return launch_cublas(problem, set, 0); },
                       timing_options_from_json(req.value("timing", WorkerJson::object())));
  if (m.status != CUDA_SUCCESS) return error_reply(failure(m.status, "cuBLAS"));
  return {{"ok", true}, {"timing", to_json(m.timing)}, {"telemetry", to_json(m.telemetry)}};
}

WorkerJson GpuWorker::time_copy(const WorkerJson& req) {
  const std::size_t bytes = req.at("bytes").get<std::size_t>();
  auto src = alloc(bytes);
  if (!src) return error_reply(src.error().message);
  auto dst = alloc(bytes);
  if (!dst) {
    m_d.cuMemFree(*src);
    return error_reply(dst.error().message);
  }
  m_d.cuMemsetD8Async(*src, 0x3c, bytes, m_stream);
  const int saved_sets = m_sets;
  m_sets = 1;
  Measured m = measure([&](int) { return m_d.cuMemcpyDtoDAsync(*dst, *src, bytes, m_stream); },
                       timing_options_from_json(req.value("timing", WorkerJson::object())));
  m_sets = saved_sets;
  m_d.cuMemFree(*src);
  m_d.cuMemFree(*dst);
  if (m.status != CUDA_SUCCESS) return error_reply(failure(m.status, "copy"));
  return {{"ok", true},
          {"timing", to_json(m.timing)},
          {"gbps", 2.0 * double(bytes) / (m.timing.median_us * 1e3)},
          {"telemetry", to_json(m.telemetry)}};
}

WorkerJson GpuWorker::occupancy(const WorkerFrame& req) {
  const WorkerJson& h = req.header;
  const LaunchGeometry g = launch_from_json(h.at("launch"));
  auto answer = [](int n, const std::string& why) {
    return WorkerJson{{"ok", true}, {"max_active_clusters", n}, {"message", why}};
  };
  CUmodule module = nullptr;
  if (CUresult r = m_d.cuModuleLoadData(&module, req.blob.data()); r != CUDA_SUCCESS)
    return answer(0, failure(r, "cuModuleLoadData"));
  CUfunction fn = nullptr;
  CUresult r =
      m_d.cuModuleGetFunction(&fn, module, h.at("lowered_name").get<std::string>().c_str());
  if (r == CUDA_SUCCESS && g.smem > 48 * 1024)
    r = m_d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(g.smem));
  int n = 0;
  std::string why;
  if (r != CUDA_SUCCESS) {
    why = failure(r, "kernel");
  } else if (g.cluster_size() == 1) {
    // One block per cluster: blocks resident per SM times the SMs.
    const int threads = int(g.block[0] * g.block[1] * g.block[2]);
    if ((r = m_d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, threads, g.smem)) ==
        CUDA_SUCCESS)
      n *= m_info.device_class.sm_count;
    else
      why = failure(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  } else if (!m_d.cuOccupancyMaxActiveClusters) {
    why = "the CUDA driver has no cuOccupancyMaxActiveClusters";
  } else {
    CUlaunchAttribute attr;
    const CUlaunchConfig config = launch_config(g, m_stream, attr);
    if ((r = m_d.cuOccupancyMaxActiveClusters(&n, fn, &config)) != CUDA_SUCCESS)
      why = failure(r, "cuOccupancyMaxActiveClusters");
  }
  if (!m_poisoned) m_d.cuModuleUnload(module);
  if (r != CUDA_SUCCESS) n = 0;
  if (n == 0 && why.empty()) why = "no block (cluster) of this launch fits on the GPU";
  return answer(n, why);
}

int run_worker(int fd, int ordinal) {
  auto worker = GpuWorker::create(ordinal);
  if (!worker) {
    write_worker_frame(fd, {{"ok", false}, {"error", worker.error().message}, {"fatal", true}});
    return 2;
  }
  while (true) {
    auto frame = read_worker_frame(fd, -1);
    if (!frame) return frame.error().code == ErrorCode::unavailable ? 0 : 2;  // parent gone: done
    if (frame->header.value("op", "") == "shutdown") return 0;
    bool exit_after = false;
    WorkerJson reply = (*worker)->handle(*frame, exit_after);
    if (!write_worker_frame(fd, reply)) return 0;
    if (exit_after) std::_Exit(3);  // the context is poisoned: only a new process recovers
  }
}

}  // namespace ktune
