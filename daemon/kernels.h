// KernelService: the kernel op's work — from "this template config for this problem on this
// device class" to the cubin an application loads, with its launch description.
//
// fetch() validates on the calling thread (an executor thread; microseconds): the problem, the
// device class, the template (installed, implementing the problem on that arch, the same hash as
// a quoted lookup entry), the params (each in its domain, every constraint held) and the arch.
// A cubin already in the store's cubins family is answered there and then. Otherwise the compile
// runs on the Compiler's pool and the reply is sent from there when it finishes, so no executor
// thread waits on NVRTC; requests for a cubin whose compile is already running join it (one
// NVRTC compile however many ask), each still answered with its own launch description (the same
// cubin serves every shape of a config). A request is validated and compiled with one snapshot of
// the templates, held until its compile has finished: a reload meanwhile changes nothing under
// it. Thread-safe. Compiles may finish after the service is
// gone (the pool outlives it at shutdown): their callbacks hold only shared state, and after
// stop() they answer nobody.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/launch.h"
#include "daemon/lookups.h"
#include "store/store.h"
#include "tuner/compiler.h"

namespace ktune {

// `given` as a config of template `m`: every param named once, known to the template and inside
// its domain, none missing; bad_request naming the first that is not.
protocol::Expected<Params> checked_params(
    const Manifest& m, const std::vector<std::pair<std::string, std::int64_t>>& given);

class KernelService {
 public:
  // Receives the reply's result (the protocol::KernelImage as JSON) or the error; called once.
  using Done = std::function<void(protocol::Expected<protocol::Json>)>;
  // Runs a compile asynchronously and calls back with its result (Compiler::submit; tests pass
  // one they complete by hand).
  using CompileFn = std::function<void(CompileRequest, std::function<void(CompileResult)>)>;

  struct Stats {
    std::uint64_t requests = 0;  // fetch() calls
    std::uint64_t errors = 0;    // refused (bad request) or failed (compile error)
    std::uint64_t cache = 0;     // answered from the cubins family
    std::uint64_t compiles = 0;  // compiles started
    std::uint64_t shared = 0;    // requests that joined a compile already running
  };

  // `cubins` is the store holding the cubins family (may be null: always compile).
  // REQUIRES: every reference outlives the service and every reply in flight.
  KernelService(const TemplateSet& templates, const LookupService& lookups, Store* cubins,
                CompileFn compile);
  ~KernelService();  // stop()s

  // Calls `done` exactly once: at once for an error or a cached cubin, else from the compile pool.
  void fetch(const protocol::KernelRequest& request, Done done);

  // Requests still waiting for a compile get no reply after this (the daemon is shutting down and
  // their sessions are gone); returns once no reply is being delivered.
  void stop();

  Stats stats() const;
  // Prometheus text for the counters above (ktune_kernel_requests_total by source, ...).
  std::string metrics_text() const;

 private:
  // One request waiting for a cubin: its own reply, less the cubin and compile facts.
  struct Waiter {
    protocol::KernelImage image;
    Done done;
  };
  struct Validated {
    TemplateSet::Snapshot templates;  // compile.tmpl points into it
    CompileRequest compile;
    protocol::KernelImage image;
  };

  // What compile callbacks share with the service; lives as long as the last of them.
  struct Shared {
    std::mutex mutex;
    std::condition_variable idle;
    std::unordered_map<std::string, std::vector<Waiter>> running;  // by cubin id
    Stats stats;
    bool stopped = false;
    int delivering = 0;  // finish() calls handing out replies
  };

  protocol::Expected<Validated> validate(const protocol::KernelRequest& request) const;
  // Every waiter of the compile of `cubin_id` gets its reply (unless stopped).
  static void finish(Shared& shared, const std::string& cubin_id, const CompileResult& result);
  static protocol::Expected<protocol::Json> reply(protocol::KernelImage image,
                                                  const CubinEntry& cubin, std::string source);

  const TemplateSet& m_templates;
  const LookupService& m_lookups;
  Store* m_cubins;
  CompileFn m_compile;
  std::shared_ptr<Shared> m_shared = std::make_shared<Shared>();
};

}  // namespace ktune
