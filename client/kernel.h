// ktune::Kernel — launches a kernel ktuned served (the `kernel` op's cubin and launch
// description) on a CUDA stream, with no NVRTC and no manifest on the application's side.
//
//   ktune::Client client;
//   auto k = client.kernel(protocol::kernel_request_for(problem, "", lookup->entries[0]));
//   auto kernel = ktune::Kernel::create(std::move(*k));
//   (*kernel)->launch({a_ptr, b_ptr, c_ptr}, stream);     // in/out buffers in argument order
//
// The CUDA driver is dlopen'ed on the first launch (client/cuda_api.h): nothing here links
// libcuda, so an application builds and starts without a driver and gets a clear error only when
// it launches.
//
// A config serves every shape from one cubin (the description's cubin_id), and the Kernels of one
// config share what they load: create_like() makes the Kernel of another shape (a lookup entry's
// launch description) from a Kernel of the config, with no kernel op, no copy of the cubin and no
// module load. So a model whose shapes vary (a batch of any size) holds one module and one set of
// workspaces per config, not per shape (ktune::Launcher does this for every problem it serves).
// - The module is loaded once per CUDA context (the context current on the launching thread),
//   after checking that the cubin's arch is the current device's; the dynamic shared-memory limit
//   is raised to the largest a launch of the config asked so far.
// - Workspaces are allocated at the config's first launch per context and stream and zeroed on
//   that stream, unless the application lends its own (borrow_workspace): launches on two streams
//   may run at once, and a split-K kernel's partials and tile tickets must not be shared by two
//   launches in flight. Every shape of the config takes the same ones on a stream; a shape that
//   needs more gets new ones of twice the size, and the old stay allocated (a graph may hold
//   them). A workspace that must read zero but is left dirty (no template declares one) is the
//   Kernel's own.
// - The modules and workspaces go with the config's last Kernel. They are keyed by the CUDA
//   context's handle: do not destroy a context while Kernels that launched in it live.
// CUDA graphs: a first launch on a stream being captured (any capture mode) loads the module and
// allocates with this thread's capture mode relaxed for those calls, and zeroes the workspaces on
// a private stream, waited for: the graph holds only the kernel, and replays reuse that stream's
// workspaces, whatever the shape (replay graphs captured on one stream one at a time). Keep a
// Kernel of the config alive while a graph that launched it may replay. Launches on the
// per-thread default stream (CU_STREAM_PER_THREAD) from several threads share one set of
// workspaces though they may run at once: give each thread a stream of its own. Thread-safe: launches from
// several threads are fine.
//
// Tensor maps (sm_90 templates such as gemm_tma): a `tensor_map` argument is parsed at create()
// (client/tensor_map.h) and encoded on every launch with cuTensorMapEncodeTiled from the address
// of the buffer it maps, into 64-byte-aligned storage on the launching thread's stack (no
// allocation). That buffer is `"pass": false` — no kernel parameter of its own — but it is one
// of launch()'s buffers all the same: launch() takes every in/out/inout argument in order,
// passed or not (gemm_tma: A, B, C). Only templates with tensor maps have unpassed buffers, so
// this changes nothing for the others.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "launch.h"
#include "tensor_map.h"

namespace ktune {

// A scalar argument's value for one launch, by name (e.g. alpha, beta, eps); scalars not named
// take the description's value.
struct ScalarArg {
  std::string_view name;
  double value = 0;
};

class Kernel {
 public:
  // Checks the image — the cubin is a CUDA ELF for the arch the description names and holds the
  // entry symbol; every argument kind is one this client can pass; every tensor_map's fields are
  // well-formed and name one of the buffers — and loads nothing yet.
  static protocol::Expected<std::shared_ptr<Kernel>> create(protocol::KernelImage image);
  // The Kernel of another shape of `config`'s config: `launch` (a lookup entry's launch
  // description, for `problem_key`) names config's cubin_id and arch. It shares config's cubin,
  // modules and workspaces. Refused (bad_request) when the cubin differs or an argument is
  // malformed.
  static protocol::Expected<std::shared_ptr<Kernel>> create_like(const Kernel& config,
                                                                 protocol::LaunchDescription launch,
                                                                 std::string problem_key);
  ~Kernel();  // frees the workspaces it owns alone; the config's last Kernel, the shared ones
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Launches on `stream` (a CUstream; nullptr = the legacy default stream) with the device
  // addresses of the buffer arguments that are not workspaces (in, out, inout; passed or only
  // reached through a tensor map), in argument order.
  // REQUIRES: a CUDA context is current on this thread; each buffer holds at least the bytes the
  // description gives for it. A buffer address that is 0 or off 16 bytes is refused
  // (bad_request), as is a scalar that is not one of the kernel's f32 coefficients (alpha, beta,
  // eps): the i32/i64 scalars are the dimensions it was served for.
  protocol::Expected<void> launch(std::span<const std::uint64_t> buffers, void* stream,
                                  std::span<const ScalarArg> scalars = {});
  protocol::Expected<void> launch(std::initializer_list<std::uint64_t> buffers, void* stream) {
    return launch(std::span<const std::uint64_t>(buffers.begin(), buffers.size()), stream);
  }

  // Lends a workspace for launches in the current context, on every stream, instead of the
  // Kernel's own. The caller keeps it alive and zeroed as the description says
  // (zero_before_first_use), and launches that share it one at a time.
  protocol::Expected<void> borrow_workspace(std::string_view name, std::uint64_t address,
                                            std::uint64_t bytes);

  // The kernel op's result less its cubin (image().cubin is empty: the bytes are cubin()).
  const protocol::KernelImage& image() const { return m_image; }
  const std::string& cubin() const;
  const protocol::LaunchDescription& description() const { return m_image.launch; }
  // Names of the buffers launch() takes, in order.
  const std::vector<std::string>& buffer_names() const { return m_buffer_names; }

 private:
  // How one kernel parameter is filled at launch.
  struct Slot {
    enum class From { buffer, workspace, scalar, tensor_map } from = From::scalar;
    int index = 0;  // buffer: into launch()'s buffers; workspace: into workspaces; tensor_map:
                    // into m_maps
    std::uint64_t bits = 0;  // scalar: its bytes (i32 and f32 in the low 4)
    std::string_view dtype;  // scalar: i32 i64 f32
    std::string_view name;
  };
  // The workspaces of launches on one stream, per workspace argument: the config's (shared) or
  // this Kernel's own.
  struct StreamWorkspaces {
    void* stream = nullptr;  // CUstream
    std::vector<std::uint64_t> addresses;
    std::vector<std::uint64_t> owned;  // this Kernel's alone (freed with it), or 0
  };
  // The config's function in one CUDA context.
  struct Loaded {
    void* context = nullptr;                   // CUcontext
    void* function = nullptr;                  // CUfunction (the module is the config's)
    std::vector<std::uint64_t> lent;           // per workspace argument: lent address, or 0
    std::vector<StreamWorkspaces> per_stream;  // few: one per stream launched on
  };
  // What the Kernels of one config share (kernel.cc): the cubin, the module per context and the
  // workspaces per context and stream.
  struct Shared;

  Kernel(protocol::KernelImage image, std::shared_ptr<Shared> shared);
  protocol::Expected<void> plan_slots();
  // A launch's scalar override names an f32 coefficient of this kernel, with a value f32 holds;
  // the i32/i64 scalars are dimensions the kernel was served for.
  protocol::Expected<void> check_scalar(const ScalarArg& o) const;
  // The module for the current context, loading it (arch check, smem attribute) on first use.
  protocol::Expected<Loaded*> current();
  protocol::Expected<void> load_into(Loaded& l);
  // Writes the workspace addresses for a launch on `stream` into out[0..workspaces): the lent
  // ones, and the Kernel's own for that stream, allocated and zeroed on it at its first launch
  // there. REQUIRES: m_mutex held; out holds a slot per workspace argument.
  protocol::Expected<void> workspaces_for(Loaded& l, void* stream, std::span<std::uint64_t> out);
  // The workspaces for a first launch on `stream` (0 where lent): the config's where they are big
  // enough, else allocated and zeroed; inside a graph capture too (see the header comment).
  protocol::Expected<StreamWorkspaces> allocate_workspaces(const Loaded& l, void* stream);

  protocol::KernelImage m_image;
  std::shared_ptr<Shared> m_shared;
  std::vector<Slot> m_slots;
  std::vector<std::string> m_buffer_names;
  std::vector<const protocol::LaunchArg*> m_workspace_args;
  std::vector<TensorMapPlan> m_maps;
  std::mutex m_mutex;
  std::vector<std::unique_ptr<Loaded>> m_loaded;  // few: one per context used
};

}  // namespace ktune
