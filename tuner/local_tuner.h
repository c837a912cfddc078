// LocalTuner: everything a tuning job needs on this machine, assembled: template registry, NVRTC
// compiler with the store's cubin cache, a worker on one GPU, and the node's validators. Used by
// `ktune tune` (standalone mode) and ktune-bench; the daemon builds the same pieces itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/store.h"
#include "tuner/cuda_driver.h"
#include "tuner/tuning_job.h"

namespace ktune {

struct LocalTunerOptions {
  std::vector<std::string> template_dirs;  // empty: the built-in templates
  std::string data_dir;                    // RocksDB store at <data_dir>/db; empty: in memory
  int device = 0;                          // GPU ordinal
  unsigned compile_threads = 0;            // 0: one per core
  std::string worker_binary;               // empty: default_worker_binary()
  int trial_timeout_ms = 20'000;
};

class LocalTuner {
 public:
  static Result<std::unique_ptr<LocalTuner>> open(const LocalTunerOptions& options);

  Result<TuneResult> tune(const TuneRequest& request, const TuningJob::ProgressFn& progress = {});

  const TemplateRegistry& templates() const { return m_templates; }
  Compiler& compiler() { return *m_compiler; }
  TrialRunner& runner() { return *m_runner; }
  Store& store() { return *m_store; }
  const TuneContext& context() const { return m_context; }
  const GpuInfo& gpu() const { return m_gpu; }

 private:
  LocalTuner() = default;
  TemplateRegistry m_templates;
  std::unique_ptr<Store> m_store;
  std::unique_ptr<Compiler> m_compiler;
  std::unique_ptr<TrialRunner> m_runner;
  TuneContext m_context;
  GpuInfo m_gpu;
};

}  // namespace ktune
