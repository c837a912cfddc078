#include "tuner/local_tuner.h"

#include <unistd.h>

#include "config/config.h"
#include "store/mem_store.h"
#include "store/rocksdb_store.h"

namespace ktune {

Result<std::unique_ptr<LocalTuner>> LocalTuner::open(const LocalTunerOptions& o) {
  std::unique_ptr<LocalTuner> t(new LocalTuner());
  auto gpus = query_gpus();
  if (!gpus) return std::unexpected(gpus.error());
  if (o.device < 0 || size_t(o.device) >= gpus->size())
    return fail(ErrorCode::not_found, "no GPU " + std::to_string(o.device) + " (have " +
                                          std::to_string(gpus->size()) + ")");
  t->m_gpu = (*gpus)[size_t(o.device)];
  t->m_templates = TemplateRegistry::load(
      o.template_dirs.empty() ? std::vector<std::string>{builtin_template_dir()} : o.template_dirs);
  if (o.data_dir.empty()) {
    auto mem = std::make_unique<MemStore>();
    if (auto ok = check_store_format(*mem, false); !ok) return std::unexpected(ok.error());
    t->m_store = std::move(mem);
  } else {
    auto db = RocksDbStore::open(o.data_dir + "/db");
    if (!db) return std::unexpected(db.error());
    t->m_store = std::move(*db);
  }
  t->m_compiler = std::make_unique<Compiler>(
      CompilerOptions{.threads = o.compile_threads, .cache = t->m_store.get()});
  RunnerOptions ro;
  if (!o.worker_binary.empty()) ro.worker_binary = o.worker_binary;
  ro.ordinal = o.device;
  ro.trial_timeout_ms = o.trial_timeout_ms;
  t->m_runner = std::make_unique<TrialRunner>(ro);
  if (auto ok = t->m_runner->start(); !ok) return std::unexpected(ok.error());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  t->m_context = TuneContext{t->m_gpu.device_class, t->m_gpu.limits, node_driver_version(),
                             Compiler::nvrtc_version(), host};
  return t;
}

Result<TuneResult> LocalTuner::tune(const TuneRequest& request,
                                    const TuningJob::ProgressFn& progress) {
  TuningJob job(m_templates, *m_compiler, m_store.get(), *m_runner, m_context);
  return job.run(request, progress);
}

}  // namespace ktune
