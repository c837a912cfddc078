#include "client/kernel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

#include "client/cubin.h"
#include "client/cuda_api.h"

namespace ktune {
namespace {

using protocol::ErrorKind;

constexpr size_t k_max_params = 64;  // on-stack argument storage per launch
constexpr size_t k_max_maps = 4;     // on-stack tensor maps per launch (gemm_tma has 2)

std::uint64_t scalar_bits(std::string_view dtype, double value) {
  std::uint64_t bits = 0;
  if (dtype == "i32") {
    const std::int32_t v = std::int32_t(value);
    std::memcpy(&bits, &v, sizeof v);
  } else if (dtype == "i64") {
    const std::int64_t v = std::int64_t(value);
    std::memcpy(&bits, &v, sizeof v);
  } else {
    const float v = float(value);
    std::memcpy(&bits, &v, sizeof v);
  }
  return bits;
}

// This thread's stream-capture mode relaxed for a scope: the calls a capture in global or
// thread-local mode forbids (cuMemAlloc, cuModuleLoadData) are then allowed, as the documentation
// of cuThreadExchangeStreamCaptureMode advises. Harmless when nothing is being captured.
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const cuda::CudaApi& api)
      : m_api(api), m_set(api.cuThreadExchangeStreamCaptureMode(&m_mode) == CUDA_SUCCESS) {}
  ~RelaxedCaptureMode() {  // the mode it had, where it was changed
    if (m_set) m_api.cuThreadExchangeStreamCaptureMode(&m_mode);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  const cuda::CudaApi& m_api;
  CUstreamCaptureMode m_mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool m_set;
};

// Whether launches of a config at other shapes may share this workspace on one stream: it reads
// zero after every launch (tile tickets) or needs no zeroing (partials).
bool shareable(const protocol::LaunchArg& a) {
  return a.left_zeroed || !a.zero_before_first_use;
}

}  // namespace

struct Kernel::Shared {
  // The config's function in one context, and the shared-memory limit raised for it.
  struct Context {
    CUcontext context = nullptr;
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    std::uint32_t smem = 0;
  };
  // A workspace of launches on one stream: argument `index`'s, `bytes` long.
  struct Workspace {
    CUcontext context = nullptr;
    void* stream = nullptr;
    size_t index = 0;
    std::uint64_t address = 0;
    std::uint64_t bytes = 0;
  };

  explicit Shared(std::string bytes) : cubin(std::move(bytes)) {}
  ~Shared();
  // The current workspace of argument `index` for launches on `stream` in `context`, or end().
  std::vector<Workspace>::iterator find(CUcontext context, void* stream, size_t index) {
    return std::find_if(workspaces.begin(), workspaces.end(), [&](const Workspace& w) {
      return w.context == context && w.stream == stream && w.index == index;
    });
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;

  const std::string cubin;
  std::mutex mutex;
  std::vector<Context> contexts;      // few: one per context launched in
  std::vector<Workspace> workspaces;  // the current one per (context, stream, index)
  std::vector<Workspace> retired;     // replaced by larger ones; a graph may still launch them
};

Kernel::Shared::~Shared() {
  auto api = cuda::CudaApi::get();
  if (!api) return;
  for (const Context& c : contexts) {
    // Free in the context that owns the memory; a context already destroyed took it along.
    if ((*api)->cuCtxPushCurrent(c.context) != CUDA_SUCCESS) continue;
    for (const auto* list : {&workspaces, &retired})
      for (const Workspace& w : *list)
        if (w.context == c.context) (*api)->cuMemFree(CUdeviceptr(w.address));
    if (c.module) (*api)->cuModuleUnload(c.module);
    CUcontext popped = nullptr;
    (*api)->cuCtxPopCurrent(&popped);
  }
}

Kernel::Kernel(protocol::KernelImage image, std::shared_ptr<Shared> shared)
    : m_image(std::move(image)), m_shared(std::move(shared)) {}

const std::string& Kernel::cubin() const {
  return m_shared->cubin;
}

protocol::Expected<std::shared_ptr<Kernel>> Kernel::create_like(const Kernel& config,
                                                                protocol::LaunchDescription launch,
                                                                std::string problem_key) {
  const auto& d = config.m_image.launch;
  if (launch.cubin_id.empty() || launch.cubin_id != d.cubin_id || launch.arch != d.arch ||
      launch.name_expression != d.name_expression)
    return protocol::error(ErrorKind::bad_request, "the launch description names cubin " +
                                                       launch.cubin_id + " (" + launch.arch + ", " +
                                                       launch.name_expression +
                                                       "), not this kernel's " + d.cubin_id + " (" +
                                                       d.arch + ", " + d.name_expression + ")");
  protocol::KernelImage image = config.m_image;  // less its cubin: config's image holds none
  image.launch = std::move(launch);
  image.problem_key = std::move(problem_key);
  std::shared_ptr<Kernel> k(new Kernel(std::move(image), config.m_shared));
  if (auto ok = k->plan_slots(); !ok) return std::unexpected(ok.error());
  return k;
}

protocol::Expected<std::shared_ptr<Kernel>> Kernel::create(protocol::KernelImage image) {
  const auto& d = image.launch;
  auto info = inspect_cubin(image.cubin);
  if (!info) return std::unexpected(info.error());
  const int sm = arch_sm(d.arch);
  if (sm == 0 || info->sm != sm)
    return protocol::error(ErrorKind::bad_request,
                           "the cubin is compiled for sm_" + std::to_string(info->sm) +
                               " but its description says " + d.arch + "; refusing to load it");
  if (image.lowered_name.empty() || !info->has_symbol(image.lowered_name))
    return protocol::error(ErrorKind::bad_request, "the cubin has no entry '" + image.lowered_name +
                                                       "' (" + d.name_expression + ")");
  auto shared = std::make_shared<Shared>(std::move(image.cubin));
  image.cubin.clear();
  std::shared_ptr<Kernel> k(new Kernel(std::move(image), std::move(shared)));
  if (auto ok = k->plan_slots(); !ok) return std::unexpected(ok.error());
  return k;
}

protocol::Expected<void> Kernel::plan_slots() {
  const auto& args = m_image.launch.args;
  // launch()'s buffers first: every in/out/inout argument, passed or not (a tensor map's buffer
  // is not, but the map is encoded from its address).
  for (const auto& a : args)
    if (a.kind == protocol::ArgKind::in || a.kind == protocol::ArgKind::out ||
        a.kind == protocol::ArgKind::inout)
      m_buffer_names.push_back(a.name);
  int buffer = 0;
  for (const auto& a : args) {
    const bool is_buffer = a.kind == protocol::ArgKind::in || a.kind == protocol::ArgKind::out ||
                           a.kind == protocol::ArgKind::inout;
    const int index = is_buffer ? buffer++ : 0;
    if (!a.pass) continue;  // memory only tensor maps refer to
    Slot s;
    s.name = a.name;
    if (a.kind == protocol::ArgKind::scalar) {
      s.from = Slot::From::scalar;
      s.dtype = a.dtype;
      s.bits = scalar_bits(a.dtype, a.value);
    } else if (a.kind == protocol::ArgKind::workspace) {
      s.from = Slot::From::workspace;
      s.index = int(m_workspace_args.size());
      m_workspace_args.push_back(&a);
    } else if (a.kind == protocol::ArgKind::tensor_map) {
      auto plan = parse_tensor_map(a, args, m_buffer_names);
      if (!plan) return std::unexpected(plan.error());
      if (m_maps.size() == k_max_maps)
        return protocol::error(ErrorKind::bad_request,
                               "more than " + std::to_string(k_max_maps) + " tensor_map arguments");
      s.from = Slot::From::tensor_map;
      s.index = int(m_maps.size());
      m_maps.push_back(std::move(*plan));
    } else {
      s.from = Slot::From::buffer;
      s.index = index;
    }
    m_slots.push_back(s);
  }
  if (m_slots.size() > k_max_params || m_workspace_args.size() > k_max_params)
    return protocol::error(ErrorKind::bad_request,
                           "more than " + std::to_string(k_max_params) + " kernel arguments");
  return {};
}

Kernel::~Kernel() {
  auto api = cuda::CudaApi::get();
  if (!api) return;
  for (auto& l : m_loaded) {
    // Free in the context that owns the memory; a context already destroyed took it along.
    if ((*api)->cuCtxPushCurrent(static_cast<CUcontext>(l->context)) != CUDA_SUCCESS) continue;
    for (const auto& s : l->per_stream)
      for (std::uint64_t w : s.owned)
        if (w) (*api)->cuMemFree(CUdeviceptr(w));
    CUcontext popped = nullptr;
    (*api)->cuCtxPopCurrent(&popped);
  }
}

protocol::Expected<Kernel::Loaded*> Kernel::current() {
  auto api = cuda::CudaApi::get();
  if (!api) return std::unexpected(api.error());
  CUcontext ctx = nullptr;
  if (CUresult r = (*api)->cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS)
    return std::unexpected((*api)->error(r, "cuCtxGetCurrent"));
  if (!ctx)
    return protocol::error(ErrorKind::unavailable,
                           "no CUDA context is current on this thread (create one, or make the "
                           "device current: cudaSetDevice / cuCtxSetCurrent)");
  for (auto& l : m_loaded)
    if (l->context == ctx) return l.get();
  auto l = std::make_unique<Loaded>();
  l->context = ctx;
  l->lent.resize(m_workspace_args.size());
  if (auto ok = load_into(*l); !ok) return std::unexpected(ok.error());
  m_loaded.push_back(std::move(l));
  return m_loaded.back().get();
}

protocol::Expected<void> Kernel::load_into(Loaded& l) {
  const cuda::CudaApi& api = **cuda::CudaApi::get();
  const auto& d = m_image.launch;
  CUdevice dev = 0;
  int major = 0, minor = 0;
  if (CUresult r = api.cuCtxGetDevice(&dev); r != CUDA_SUCCESS)
    return std::unexpected(api.error(r, "cuCtxGetDevice"));
  api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (major * 10 + minor != arch_sm(d.arch))
    return protocol::error(ErrorKind::bad_request,
                           "the kernel is compiled for " + d.arch + " but the current device " +
                               std::to_string(dev) + " is sm_" +
                               std::to_string(major * 10 + minor) + " (it was served for " +
                               m_image.device + "; ask ktune for this device's class)");
  const auto ctx = static_cast<CUcontext>(l.context);
  RelaxedCaptureMode relaxed(api);  // a first launch may be inside a graph capture
  std::lock_guard lock(m_shared->mutex);
  auto& contexts = m_shared->contexts;
  auto held = std::find_if(contexts.begin(), contexts.end(),
                           [&](const Shared::Context& c) { return c.context == ctx; });
  auto raise_smem = [&](CUfunction fn) -> protocol::Expected<void> {
    if (d.smem == 0) return {};
    if (CUresult r = api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            int(d.smem));
        r != CUDA_SUCCESS)
      return std::unexpected(api.error(
          r, "raising the dynamic shared memory limit to " + std::to_string(d.smem) + " bytes"));
    return {};
  };
  if (held != contexts.end()) {  // another shape of the config loaded it
    if (d.smem > held->smem) {
      if (auto ok = raise_smem(held->function); !ok) return ok;
      held->smem = d.smem;
    }
    l.function = held->function;
    return {};
  }
  CUmodule module = nullptr;
  if (CUresult r = api.cuModuleLoadData(&module, m_shared->cubin.data()); r != CUDA_SUCCESS)
    return std::unexpected(api.error(r, "cuModuleLoadData"));
  // A module whose entry or shared-memory limit failed is unloaded here, in relaxed mode: each
  // retried launch leaked one.
  auto unloaded = [&](protocol::Error e) {
    api.cuModuleUnload(module);
    return std::unexpected(std::move(e));
  };
  CUfunction fn = nullptr;
  if (CUresult r = api.cuModuleGetFunction(&fn, module, m_image.lowered_name.c_str());
      r != CUDA_SUCCESS)
    return unloaded(api.error(r, "cuModuleGetFunction(" + m_image.lowered_name + ")"));
  if (auto ok = raise_smem(fn); !ok) return unloaded(ok.error());
  contexts.push_back({ctx, module, fn, d.smem});
  l.function = fn;
  return {};
}

protocol::Expected<void> Kernel::borrow_workspace(std::string_view name, std::uint64_t address,
                                                  std::uint64_t bytes) {
  if (address == 0)
    return protocol::error(ErrorKind::bad_request,
                           "workspace '" + std::string(name) + "': lend a device address, not 0");
  std::lock_guard lock(m_mutex);
  auto l = current();
  if (!l) return std::unexpected(l.error());
  for (size_t i = 0; i < m_workspace_args.size(); ++i) {
    if (m_workspace_args[i]->name != name) continue;
    if (bytes < std::uint64_t(m_workspace_args[i]->bytes))
      return protocol::error(ErrorKind::bad_request,
                             "workspace '" + std::string(name) + "' needs " +
                                 std::to_string(m_workspace_args[i]->bytes) + " bytes, " +
                                 std::to_string(bytes) + " lent");
    (*l)->lent[i] = address;  // the Kernel's own stay allocated until it goes: one may be in use
    return {};
  }
  return protocol::error(ErrorKind::bad_request,
                         "the kernel has no workspace '" + std::string(name) + "'");
}

protocol::Expected<void> Kernel::workspaces_for(Loaded& l, void* stream,
                                                std::span<std::uint64_t> out) {
  std::copy(l.lent.begin(), l.lent.end(), out.begin());
  if (std::find(l.lent.begin(), l.lent.end(), 0) == l.lent.end()) return {};  // all lent, or none
  auto it = std::find_if(l.per_stream.begin(), l.per_stream.end(),
                         [&](const StreamWorkspaces& s) { return s.stream == stream; });
  if (it == l.per_stream.end()) {
    auto mine = allocate_workspaces(l, stream);
    if (!mine) return std::unexpected(mine.error());
    l.per_stream.push_back(std::move(*mine));
    it = std::prev(l.per_stream.end());
  }
  for (size_t i = 0; i < l.lent.size(); ++i)
    if (!out[i]) out[i] = it->addresses[i];
  return {};
}

protocol::Expected<Kernel::StreamWorkspaces> Kernel::allocate_workspaces(const Loaded& l,
                                                                         void* stream_handle) {
  const cuda::CudaApi& api = **cuda::CudaApi::get();
  const auto stream = static_cast<CUstream>(stream_handle);
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (CUresult r = api.cuStreamIsCapturing(stream, &capture); r != CUDA_SUCCESS)
    return std::unexpected(api.error(r, "cuStreamIsCapturing"));
  if (capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return protocol::error(ErrorKind::unavailable,
                           m_image.lowered_name +
                               ": the CUDA graph capture on this stream has been invalidated (an "
                               "earlier call broke it)");
  // A new workspace is zeroed before the first launch on `stream` whatever other streams do,
  // whatever the description says (harmless for scratch, required for the rest): on `stream`
  // itself, or, while it is being captured, on a private stream waited for, so the graph holds
  // only the kernel and no memset that would run at every replay.
  const bool capturing = capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const auto ctx = static_cast<CUcontext>(l.context);
  RelaxedCaptureMode relaxed(api);
  std::lock_guard lock(m_shared->mutex);
  auto& held = m_shared->workspaces;
  StreamWorkspaces out{stream_handle, std::vector<std::uint64_t>(l.lent.size(), 0),
                       std::vector<std::uint64_t>(l.lent.size(), 0)};
  std::vector<Shared::Workspace> made;  // the config's new ones, registered once all succeeded
  std::vector<std::uint64_t> fresh;     // every allocation made here, freed if one step fails
  CUstream mine = nullptr;              // the private stream, created only while capturing
  CUresult r = CUDA_SUCCESS;
  std::string what;
  for (size_t i = 0; i < l.lent.size() && r == CUDA_SUCCESS; ++i) {
    if (l.lent[i]) continue;
    const protocol::LaunchArg& a = *m_workspace_args[i];
    const bool shared = shareable(a);
    auto old = shared ? m_shared->find(ctx, stream_handle, i) : held.end();
    if (old != held.end() && old->bytes >= std::uint64_t(a.bytes)) {
      out.addresses[i] = old->address;
      continue;
    }
    const std::uint64_t bytes = old != held.end() ? std::max(std::uint64_t(a.bytes), 2 * old->bytes)
                                                  : std::uint64_t(a.bytes);
    if (capturing && !mine) {
      what = "creating a stream to zero workspaces on";
      if ((r = api.cuStreamCreate(&mine, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) break;
    }
    what =
        "allocating and zeroing workspace '" + a.name + "' (" + std::to_string(bytes) + " bytes)";
    CUdeviceptr p = 0;
    r = api.cuMemAlloc(&p, size_t(bytes));
    if (r != CUDA_SUCCESS) break;
    fresh.push_back(std::uint64_t(p));
    out.addresses[i] = std::uint64_t(p);
    if (shared)
      made.push_back({ctx, stream_handle, i, std::uint64_t(p), bytes});
    else
      out.owned[i] = std::uint64_t(p);
    r = api.cuMemsetD8Async(p, 0, size_t(bytes), capturing ? mine : stream);
  }
  if (capturing && mine && r == CUDA_SUCCESS) {
    what = "zeroing workspaces";
    r = api.cuStreamSynchronize(mine);
  }
  if (mine) api.cuStreamDestroy(mine);
  if (r != CUDA_SUCCESS) {
    for (std::uint64_t w : fresh) api.cuMemFree(CUdeviceptr(w));
    return std::unexpected(api.error(r, what));
  }
  for (Shared::Workspace& w : made) {
    auto old = m_shared->find(w.context, w.stream, w.index);
    if (old == held.end()) {
      held.push_back(w);
    } else {  // the smaller one stays allocated until the config goes: a graph may launch it
      m_shared->retired.push_back(*old);
      *old = w;
    }
  }
  return out;
}

protocol::Expected<void> Kernel::check_scalar(const ScalarArg& o) const {
  // Every launch of ktune::gemm passes alpha and beta: nothing is built unless one is refused.
  const auto slot = std::find_if(m_slots.begin(), m_slots.end(), [&](const Slot& s) {
    return s.from == Slot::From::scalar && s.name == o.name;
  });
  const bool fits_f32 =
      !std::isfinite(o.value) || std::fabs(o.value) <= std::numeric_limits<float>::max();
  if (slot != m_slots.end() && slot->dtype == "f32" && fits_f32) return {};
  const std::string name(o.name);
  if (slot == m_slots.end()) {
    std::string names;
    for (const Slot& s : m_slots)
      if (s.from == Slot::From::scalar) names += (names.empty() ? "" : ", ") + std::string(s.name);
    return protocol::error(ErrorKind::bad_request,
                           "the kernel has no scalar '" + name + "' (its scalars: " + names + ")");
  }
  if (slot->dtype != "f32") {  // i32/i64: a dimension; the grid and workspaces were sized for it
    std::int64_t served = 0;
    if (slot->dtype == "i32") {
      std::int32_t v = 0;
      std::memcpy(&v, &slot->bits, sizeof v);
      served = v;
    } else {
      std::memcpy(&served, &slot->bits, sizeof served);
    }
    return protocol::error(ErrorKind::bad_request,
                           "scalar '" + name + "' is a dimension the kernel was served for (" +
                               name + "=" + std::to_string(served) +
                               "); ask for the kernel of the other shape");
  }
  return protocol::error(
      ErrorKind::bad_request,
      "scalar '" + name + "' = " + std::to_string(o.value) + " does not fit the kernel's f32");
}

protocol::Expected<void> Kernel::launch(std::span<const std::uint64_t> buffers, void* stream,
                                        std::span<const ScalarArg> scalars) {
  if (buffers.size() != m_buffer_names.size()) {
    std::string names;
    for (const auto& n : m_buffer_names) names += (names.empty() ? "" : ", ") + n;
    return protocol::error(ErrorKind::bad_request, m_image.template_name + " takes " +
                                                       std::to_string(m_buffer_names.size()) +
                                                       " buffers (" + names + "), " +
                                                       std::to_string(buffers.size()) + " given");
  }
  // The templates load 16 bytes at a time and TMA needs it: an address off 16 bytes (or 0)
  // faults, and the fault ends the CUDA context.
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == 0)
      return protocol::error(ErrorKind::bad_request, "buffer '" + m_buffer_names[i] +
                                                         "': its address is 0 (a null pointer)");
    if (buffers[i] % 16 != 0) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(buffers[i]));
      return protocol::error(
          ErrorKind::bad_request,
          "buffer '" + m_buffer_names[i] + "': its address " + hex + " is not 16-byte aligned");
    }
  }
  for (const ScalarArg& o : scalars)
    if (auto ok = check_scalar(o); !ok) return ok;
  Loaded* l = nullptr;
  std::array<std::uint64_t, k_max_params> workspaces;  // no more workspaces than parameters
  {
    std::lock_guard lock(m_mutex);
    auto cur = current();
    if (!cur) return std::unexpected(cur.error());
    l = *cur;
    if (auto ok = workspaces_for(*l, stream, workspaces); !ok) return ok;
  }
  const cuda::CudaApi& api = **cuda::CudaApi::get();
  std::array<std::uint64_t, k_max_params> storage;
  std::array<void*, k_max_params> params;
  std::array<CUtensorMap, k_max_maps> maps;  // CUtensorMap is alignas(64), 128 bytes
  static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) >= 64);
  for (size_t i = 0; i < m_slots.size(); ++i) {
    const Slot& s = m_slots[i];
    switch (s.from) {
      case Slot::From::buffer:
        storage[i] = buffers[size_t(s.index)];
        break;
      case Slot::From::workspace:
        storage[i] = workspaces[size_t(s.index)];
        break;
      case Slot::From::scalar:
        storage[i] = s.bits;
        for (const auto& o : scalars)
          if (o.name == s.name) storage[i] = scalar_bits(s.dtype, o.value);
        break;
      case Slot::From::tensor_map: {
        const TensorMapPlan& m = m_maps[size_t(s.index)];
        CUtensorMap* map = &maps[size_t(s.index)];
        if (CUresult r = api.cuTensorMapEncodeTiled(
                map, CUtensorMapDataType(m.data_type), m.rank,
                reinterpret_cast<void*>(buffers[size_t(m.buffer)]), m.dims.data(), m.strides.data(),
                m.box.data(), m.element_strides.data(), CUtensorMapInterleave(m.interleave),
                CUtensorMapSwizzle(m.swizzle), CUtensorMapL2promotion(m.l2_promotion),
                CUtensorMapFloatOOBfill(m.oob_fill));
            r != CUDA_SUCCESS)
          return std::unexpected(api.error(r, "encoding tensor_map '" + m.name + "' over buffer '" +
                                                  m_buffer_names[size_t(m.buffer)] +
                                                  "' (cuTensorMapEncodeTiled)"));
        params[i] = map;
        continue;
      }
    }
    params[i] = &storage[i];
  }
  const auto& d = m_image.launch;
  CUlaunchConfig config{};
  config.gridDimX = d.grid[0];
  config.gridDimY = d.grid[1];
  config.gridDimZ = d.grid[2];
  config.blockDimX = d.block[0];
  config.blockDimY = d.block[1];
  config.blockDimZ = d.block[2];
  config.sharedMemBytes = d.smem;
  config.hStream = static_cast<CUstream>(stream);
  CUlaunchAttribute cluster{};
  if (d.has_cluster) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = d.cluster[0];
    cluster.value.clusterDim.y = d.cluster[1];
    cluster.value.clusterDim.z = d.cluster[2];
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  if (CUresult r = api.cuLaunchKernelEx(&config, static_cast<CUfunction>(l->function),
                                        params.data(), nullptr);
      r != CUDA_SUCCESS)
    return std::unexpected(api.error(r, "cuLaunchKernelEx(" + m_image.lowered_name + ")"));
  return {};
}

}  // namespace ktune
