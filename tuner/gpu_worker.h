// GpuWorker: the measurement engine inside ktune-worker. Owns one GPU's CUDA context: allocates
// and fills the arguments, encodes tensor maps over them (one per input set), runs references (a
// reference kernel or cuBLAS), verifies candidates against them, and times them (events, warm-up,
// rotating input sets, CUDA graphs for short kernels, median and spread); launches clusters with
// cuLaunchKernelEx and answers occupancy queries. docs/worker-protocol.md lists its ops.
//
// A sticky CUDA error (illegal address, ...) poisons the context for good: handle() then answers
// "crash" and sets `exit_after`; the process must exit and its parent respawns it.
// Single-threaded: one request at a time, on the thread that created it.
#pragma once

#include <cuda.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tuner/cuda_driver.h"
#include "tuner/telemetry_window.h"
#include "tuner/worker_protocol.h"

namespace ktune {

class GpuWorker {
 public:
  static Result<std::unique_ptr<GpuWorker>> create(int ordinal);
  ~GpuWorker();

  // Handles one request frame; returns the reply header.
  WorkerJson handle(const WorkerFrame& request, bool& exit_after);

 private:
  struct Buffer {
    ArgValue spec;
    std::vector<CUdeviceptr> sets;      // in/inout: one per input set; out/workspace: one
    std::vector<CUdeviceptr> pristine;  // inout: the initial contents per set
    std::size_t bytes = 0;
  };
  struct Loaded {
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    TrialRequest request;
    std::uint64_t last_used = 0;  // for least-recently-used eviction
  };
  using LaunchFn = std::function<CUresult(int set)>;

  explicit GpuWorker(const CudaDriver& d);
  Result<void> init(int ordinal);

  WorkerJson hello();
  WorkerJson setup(const WorkerJson& req);
  WorkerJson reference(const WorkerFrame& req);
  WorkerJson trial(const WorkerFrame& req);
  WorkerJson retime(const WorkerJson& req);
  WorkerJson time_cublas(const WorkerJson& req);
  WorkerJson time_copy(const WorkerJson& req);
  WorkerJson occupancy(const WorkerFrame& req);

  Result<void> free_buffers();
  Result<CUdeviceptr> alloc(std::size_t bytes);
  // Launches one of the worker's own element-wise kernels over n elements.
  Result<void> launch_helper(CUfunction f, unsigned long long n, unsigned max_blocks, void** params,
                             const char* what);
  Result<void> fill(CUdeviceptr p, const ArgValue& spec, unsigned seed);
  Result<void> poison(CUdeviceptr p, const ArgValue& spec);
  // Makes buffers at least as large as `args` asks (workspaces vary per config).
  Result<void> ensure_capacity(const std::vector<ArgValue>& args);
  // Restores inout inputs, poisons outputs and zeroes workspaces for a verification run on `set`.
  Result<void> prepare_verification(const std::vector<ArgValue>& args, int set);
  CUresult launch_kernel(CUfunction f, const LaunchGeometry& g, const std::vector<ArgValue>& args,
                         int set);
  // The encoded map of a tensor_map argument over its buffer's copy for `set` (cached: the map
  // embeds the address). ErrorCode::invalid_argument when the driver refuses the encoding,
  // ErrorCode::unavailable when it has no cuTensorMapEncodeTiled.
  Result<const CUtensorMap*> tensor_map(const ArgValue& a, int set);
  // Encodes every tensor map of `args` for every input set (a trial's first check).
  Result<void> encode_tensor_maps(const std::vector<ArgValue>& args);
  CUresult launch_cublas(const WorkerJson& problem, int set, CUdeviceptr out_override);
  // Max relative error of the outputs of `args` against the stored references for `set`.
  Result<double> compare_outputs(const std::vector<ArgValue>& args, int set, std::string& why);
  // Times `launch` (rotating input sets); sticky errors come back as the CUresult.
  struct Measured {
    CUresult status = CUDA_SUCCESS;
    Timing timing;
    GpuTelemetry telemetry;  // read while the timed launches ran, else one read after them
  };
  Measured measure(const LaunchFn& launch, const TimingOptions& options);
  std::vector<int> verify_sets() const;
  GpuTelemetry telemetry() const;
  // The SM clock counted in-kernel now (ktune_clock_probe on the stream, 100 us; synchronizes);
  // 0 when it could not be counted.
  int counted_sm_clock_mhz();
  // What a TelemetryWindow reads: this GPU through NVML; empty without NVML.
  TelemetryWindow::Source telemetry_source() const;
  Buffer* buffer(const std::string& name);

  // Records a CUDA failure: sticky ones poison the worker (m_poisoned).
  std::string failure(CUresult r, const char* what);

  const CudaDriver& m_d;
  CUdevice m_device = 0;
  CUcontext m_ctx = nullptr;
  CUstream m_stream = nullptr;
  GpuInfo m_info;
  CUmodule m_helpers = nullptr;
  CUfunction m_fill = nullptr, m_poison = nullptr, m_compare = nullptr;
  CUfunction m_clock_probe = nullptr;
  CUdeviceptr m_probe = 0;  // ktune_clock_probe's {ns, cycles, start}
  CUdeviceptr m_acc = 0;
  CUdeviceptr m_flush = 0;  // the L2 flush's buffer (TimingL2::flushed), allocated on first use
  std::size_t m_flush_bytes = 0;
  std::vector<CUevent> m_events;
  bool m_poisoned = false;

  std::vector<Buffer> m_buffers;
  int m_sets = 1;
  unsigned m_seed = 1;
  // Reference outputs: [verify-set index][buffer name] -> device copy.
  std::map<int, std::map<std::string, CUdeviceptr>> m_refs;
  std::map<std::uint64_t, Loaded> m_loaded;
  std::uint64_t m_use_clock = 0;
  // Encoded tensor maps by (base address, dtype, fields): what a map holds is a function of the
  // key, so an entry never goes stale; the cache is dropped at setup and when it grows large.
  using TensorMapKey = std::tuple<CUdeviceptr, std::string, std::vector<std::uint64_t>,
                                  std::vector<std::uint64_t>, std::vector<std::uint32_t>,
                                  std::vector<std::uint32_t>, int, int, int>;
  std::map<TensorMapKey, CUtensorMap> m_tensor_maps;  // node storage keeps CUtensorMap's alignment

  struct Cublas;
  std::unique_ptr<Cublas> m_cublas;
};

// ktune-worker's main loop: serve frames on `fd` until EOF. Returns the process exit code.
int run_worker(int fd, int ordinal);

}  // namespace ktune
