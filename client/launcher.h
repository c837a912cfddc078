// ktune::Launcher and the typed helpers: launch ktune's kernel for a built-in op in one call.
//
//   ktune::Client client;
//   ktune::Launcher launcher(client);                 // the daemon's GPU; or name a device class
//   auto ok = ktune::gemm(launcher, {4096, 14336, 4096}, x, w, y, stream);   // y = x @ w^T
//
// The first call for a shape looks it up (protocol v2), fetches the best entry's cubin (the
// daemon compiles it on first request) and loads it; later calls for the same shape find the
// Kernel in a map and launch (a few microseconds of host time). A shape whose best entry is a
// config already fetched for another shape (the same cubin_id) needs only the lookup: its Kernel
// shares that config's cubin, module and workspaces (Kernel::create_like), so a model whose shapes
// vary holds one module per config. The map keeps the max_kernels() shapes added last; one
// dropped is looked up again when asked (the config's module stays). An entry the daemon cannot
// serve (a template not installed, a compile failure) falls through to the next. Errors are
// returned, never thrown; the application decides its fallback (e.g. cuBLAS).
// Thread-safe. Buffers are device addresses (CUdeviceptr values); streams are CUstreams.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "client.h"
#include "kernel.h"

namespace ktune {

class Launcher {
 public:
  // `device`: the device class the kernels are for ("" = the daemon's GPU). `pin`: look up from
  // this pin only (`ktune pin create`), so every rank of a distributed job launches the same
  // kernels ("" = the daemon's live table). REQUIRES: `client` outlives the Launcher.
  explicit Launcher(Client& client, std::string device = "", std::string pin = "");

  // The kernel for `problem`, looked up and fetched on first use, then kept.
  protocol::Expected<std::shared_ptr<Kernel>> kernel(const protocol::ProblemSpec& problem);
  // Kernels held (one per distinct problem asked, the max_kernels() added last).
  size_t size() const;
  // Configs fetched (one Kernel of each kept, holding the config's module and workspaces).
  size_t configs() const;
  size_t max_kernels() const;
  void set_max_kernels(size_t n);  // at least 1; default 4096

 private:
  protocol::Expected<std::shared_ptr<Kernel>> fetch(const protocol::ProblemSpec& problem);
  // The Kernel of a config fetched before, by cubin id (nullptr if none).
  std::shared_ptr<Kernel> config(const std::string& cubin_id) const;
  // Drops the oldest shapes past m_max_kernels. REQUIRES: m_mutex held.
  void trim();

  Client& m_client;
  std::string m_device;
  std::string m_pin;
  mutable std::mutex m_mutex;
  std::unordered_map<std::string, std::shared_ptr<Kernel>> m_kernels;  // by problem key text
  std::deque<std::string> m_order;  // m_kernels' keys, oldest added first
  size_t m_max_kernels = 4096;
  std::unordered_map<std::string, std::shared_ptr<Kernel>> m_configs;  // by cubin id
};

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C. Layout "rc" is nn.Linear's: A row-major,
// B column-major (a weight stored N x K row-major).
struct GemmShape {
  GemmShape(std::int64_t m, std::int64_t n, std::int64_t k, std::string dtype_ = "bf16",
            std::string layout_ = "rc", std::string out_dtype_ = "")
      : M(m),
        N(n),
        K(k),
        dtype(std::move(dtype_)),
        layout(std::move(layout_)),
        out_dtype(std::move(out_dtype_)) {}
  std::int64_t M, N, K;
  std::string dtype;      // bf16 | fp16
  std::string layout;     // rr rc cr cc
  std::string out_dtype;  // "" = dtype
};
protocol::Expected<void> gemm(Launcher& launcher, const GemmShape& shape, std::uint64_t a,
                              std::uint64_t b, std::uint64_t c, void* stream, float alpha = 1,
                              float beta = 0);

// Row ops over [rows, cols] row-major; y has x's dtype.
protocol::Expected<void> softmax(Launcher& launcher, std::int64_t rows, std::int64_t cols,
                                 const std::string& dtype, std::uint64_t x, std::uint64_t y,
                                 void* stream);
protocol::Expected<void> rmsnorm(Launcher& launcher, std::int64_t rows, std::int64_t cols,
                                 const std::string& dtype, std::uint64_t x, std::uint64_t gamma,
                                 std::uint64_t y, float eps, void* stream);
protocol::Expected<void> layernorm(Launcher& launcher, std::int64_t rows, std::int64_t cols,
                                   const std::string& dtype, std::uint64_t x, std::uint64_t gamma,
                                   std::uint64_t beta, std::uint64_t y, float eps, void* stream);

}  // namespace ktune
