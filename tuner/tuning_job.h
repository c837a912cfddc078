// TuningJob: find the fastest correct kernel for one problem on one GPU.
//
//   spaces (every template implementing the op, pruned) -> strategy proposes a batch ->
//   compiler (NVRTC pool; the next batch compiles while this one is measured) -> worker verifies
//   and times each -> strategy observes -> ... budget spent -> finalists re-timed interleaved ->
//   winner committed (sync) with full provenance.
//
// Every trial is recorded in the store's trials table (in flight before it launches, so a crash
// is blamed on the right config); configs that crash or hang go to the blocklist for this
// template hash, arch and driver and are never tried again. Not thread-safe: one job per GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "store/records.h"
#include "tuner/compiler.h"
#include "tuner/strategy/strategy.h"
#include "tuner/worker_process.h"

namespace ktune {

struct TuneRequest {
  Problem problem;
  std::string strategy = "model";
  Budget budget{256, 600, 0};
  int finalists = 5;  // re-timed interleaved before a winner is declared
  int retime_rounds = 5;
  std::vector<std::string> templates;  // restrict to these (empty: every template for the op)
  std::vector<Params> seeds;           // extra seed configs (e.g. winners of neighbouring shapes)
  std::uint64_t rng_seed = 1;
  TimingOptions timing;
  std::string job_id;  // recorded with each trial
};

struct TuneProgress {
  int trials = 0;         // measured (or failed) so far
  int budget_trials = 0;  // the trial budget, or the candidate count when smaller
  int ok = 0;
  int failed = 0;
  double best_us = 0;
  std::string best;  // "template {params}"
  double elapsed_s = 0;
  double eta_s = 0;
};

struct TuneStats {
  size_t candidates = 0;   // after constraints and the blocklist
  double space_total = 0;  // before constraints
  int trials = 0;
  int compile_errors = 0, resource_errors = 0, wrong_results = 0, crashes = 0, timeouts = 0;
  int cache_hits = 0;
  double compile_s = 0;  // summed NVRTC time (on the pool, overlapped)
  double measure_s = 0;  // time waiting on the worker
  double wall_s = 0;
  int respawns = 0;
};

struct TuneResult {
  WinnerRecord winner;
  std::uint64_t winner_trial_id = 0;  // the worker still holds it: retime it against a baseline
  TuneStats stats;
  std::vector<TrialRecord> trials;  // in measurement order
};

// What identifies the measurements of this node (validators of every record).
struct TuneContext {
  DeviceClass device;
  DeviceLimits limits;
  std::string driver;
  std::string nvrtc;
  std::string node_id;
};

class TuningJob {
 public:
  TuningJob(const TemplateRegistry& templates, Compiler& compiler, Store* store,
            TrialRunner& runner, TuneContext context);

  using ProgressFn = std::function<void(const TuneProgress&)>;
  Result<TuneResult> run(const TuneRequest& request, const ProgressFn& progress = {});

 private:
  const TemplateRegistry& m_templates;
  Compiler& m_compiler;
  Store* m_store;
  TrialRunner& m_runner;
  TuneContext m_ctx;
};

// The args to set up for a problem: the union over candidate templates (largest counts).
Result<std::vector<ArgValue>> setup_args(const std::vector<const KernelTemplate*>& templates,
                                         const Problem& problem, const DeviceLimits& limits);

// Brings the runner's worker to this problem: arguments allocated and filled, reference run.
Result<void> prepare_runner(TrialRunner& runner, Compiler& compiler,
                            const KernelTemplate& reference_from, const std::vector<ArgValue>& args,
                            const Problem& problem, const DeviceLimits& limits, unsigned seed);

// The JSON problem description cuBLAS calls take in the worker protocol.
WorkerJson cublas_problem(const Problem& problem);

}  // namespace ktune
