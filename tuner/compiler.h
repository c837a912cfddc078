// Compiler: template + config + target arch -> cubin, with NVRTC and a persistent cubin cache.
//
// A compile failure is a result (CompileResult::Status::compile_error with the NVRTC log), not an
// Error: tuning records it as a trial outcome and goes on. Resource usage (registers, spills,
// shared memory, stack) is parsed from the ptxas report NVRTC returns with --ptxas-options=-v.
// With a Store, results are cached in its cubins table under a key made of the template hash
// (source + manifest + headers), the name expression, the options, the arch and the NVRTC
// version, so a second compile of the same config is a cache hit across restarts.
//
// Thread-safety: compile() may be called from many threads; submit() runs compiles on the
// Compiler's own pool (one thread per core by default).
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "store/records.h"
#include "templates/space.h"
#include "tuner/thread_pool.h"

namespace ktune {

struct CompileRequest {
  const KernelTemplate* tmpl = nullptr;
  std::string name_expression;  // from an Instance
  std::string arch;             // "sm_80", "sm_90", "sm_90a"
};

struct CompileResult {
  enum class Status { ok, compile_error };
  Status status = Status::ok;
  CubinEntry kernel;  // when ok: cubin, lowered name, resources, compile time
  std::string log;    // NVRTC's log (errors or the ptxas report)
  std::string cache_key;
  bool cache_hit = false;
  double wall_ms = 0;  // time this call took, cache lookups included

  bool ok() const { return status == Status::ok; }
};

struct CompilerOptions {
  unsigned threads = 0;    // pool size; 0 = one per core
  Store* cache = nullptr;  // cubin cache; nullptr = no caching
  bool use_cache = true;   // read the cache (writes happen whenever `cache` is set)
};

class Compiler {
 public:
  explicit Compiler(CompilerOptions options = {});

  // Compiles on the calling thread.
  CompileResult compile(const CompileRequest& request);
  // Compiles on the pool.
  std::future<CompileResult> submit(CompileRequest request);
  // Compiles on the pool and calls `done` there with the result (callers that must not park a
  // thread waiting, such as the daemon's kernel op). `done` must not throw.
  void submit(CompileRequest request, std::function<void(CompileResult)> done);
  // Compiles all in parallel; results in request order.
  std::vector<CompileResult> compile_all(const std::vector<CompileRequest>& requests);

  unsigned threads() const { return unsigned(m_pool.size()); }
  // NVRTC compiles run so far (cache hits not counted): what tests count to prove sharing.
  std::uint64_t compiles() const { return m_compiles.load(); }
  // "13.0"
  static std::string nvrtc_version();
  // The options every compile passes (before the template's own nvrtc_options).
  static std::vector<std::string> base_options(const std::string& arch);
  // The cubin id: XXH3-64 (16 hex digits) of everything that makes the cubin valid — template
  // hash, name expression, arch, NVRTC version and every option. The cache key is
  // "<template>/<arch>/<cubin id>"; lookups (v2) and the kernel op report the id.
  static std::string cubin_id(const CompileRequest& request);
  // The cubins family key of a request: "<template>/<arch>/<cubin id>".
  static std::string cache_key(const CompileRequest& request);

 private:
  CompilerOptions m_options;
  std::atomic<std::uint64_t> m_compiles{0};
  ThreadPool m_pool;
};

// Parses the ptxas -v report into `entry` (registers, spills, smem, stack). Exposed for tests.
void parse_ptxas_report(const std::string& log, CubinEntry& entry);

}  // namespace ktune
