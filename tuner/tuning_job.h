// TuningJob: find the fastest correct kernel for one problem on one GPU.
//
//   spaces (every template implementing the op, pruned) -> strategy proposes a batch ->
//   compiler (NVRTC pool; the next batch compiles while this one is measured) -> worker verifies
//   and times each -> strategy observes -> ... budget spent -> finalists re-timed interleaved ->
//   winner committed (sync) with full provenance.
//
// Every trial is recorded in the store's trials table: in flight before it launches (so a crash
// is blamed on the right config), then its outcome as soon as it is known (one buffered put: the
// RocksDB WAL keeps it through a kill of the process). A resumed job reads those records back
// instead of measuring the configs again. Configs that crash or hang go to the blocklist for this
// template hash, arch and driver and are never tried again. A scheduler steers a running job
// through TuneControl (cancel, GPU hand-over, disturbed measurements).
//
// Not thread-safe: one job per GPU at a time. The TuneControl hooks are called on the thread
// that runs the job.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "store/records.h"
#include "tuner/compiler.h"
#include "tuner/strategy/strategy.h"
#include "tuner/worker_process.h"

namespace ktune {

// Hooks a scheduler uses to steer a running job. Every member is optional.
struct TuneControl {
  // Checked between trials (and before the finalists); true stops the search. run() then returns
  // ErrorCode::cancelled unless `finish_on_cancel` is set, in which case it goes on to the
  // finalists with what it has (if anything passed).
  std::function<bool()> cancelled;
  bool finish_on_cancel = false;
  // Called before the worker is set up, before each measurement (not before compiles) and before
  // the finalists are re-timed; blocks while the GPU is not ours to use. Returns false when the
  // job must stop (treated like cancelled); with finish_on_cancel the finalists are then ranked
  // by their search timings, not re-timed.
  std::function<bool()> acquire_gpu;
  // A counter that moves whenever foreign work touched the GPU. A trial whose measurement
  // straddled a change (value before != value after) is discarded and measured again after
  // acquire_gpu (at most 3 retakes; then kept as is); so is the finalists' re-timing. Retakes
  // are counted in TuneStats::retaken. A crash is never retaken (it is the kernel's doing).
  std::function<std::uint64_t()> disturbance;
};

struct TuneRequest {
  Problem problem;
  std::string strategy = "model";
  Budget budget{256, 600, 0};
  int finalists = 5;  // re-timed interleaved before a winner is declared
  // Rounds of the finalists' interleaved re-timing, each a 1/rounds share of timing.target_ms per
  // finalist; 0: three per finalist, at least 5 (more, shorter rounds spread every finalist over
  // the clock drift of a GPU at its power cap).
  int retime_rounds = 0;
  std::vector<std::string> templates;  // restrict to these (empty: every template for the op)
  std::vector<Params> seeds;           // extra seed configs (e.g. winners of neighbouring shapes)
  std::uint64_t rng_seed = 1;
  TimingOptions timing;
  std::string job_id;  // recorded with each trial
  TuneControl control;
  // Continue from the trials already recorded in the store for this device class and problem:
  // each final record of a current candidate (a hash naming the same kernel; an ok one also timed
  // with the same timing.l2) counts as measured (it is not measured again, counts toward the trial
  // budget, and an ok one can be a finalist). Records still in flight (the process died
  // mid-trial) are measured again. Needs a store.
  bool resume = false;
  // Write the winner to the store when the job ends. The daemon turns this off: its Catalog is
  // the one writer of winners (merge rule, index, answer generation).
  bool store_winner = true;
};

struct TuneProgress {
  int trials = 0;         // measured (or failed) so far, reused ones included
  int reused = 0;         // of those, read back from an earlier job's records (resume)
  int budget_trials = 0;  // the trial budget, or the candidate count when smaller
  int ok = 0;
  int failed = 0;
  double best_us = 0;
  std::string best;  // "template {params}"
  double elapsed_s = 0;
  double eta_s = 0;
  // The trial this report follows (unset for the report after reused trials are read back).
  std::optional<Outcome> last_outcome;
};

struct TuneStats {
  size_t candidates = 0;   // after constraints and the blocklist
  double space_total = 0;  // before constraints
  int trials = 0;   // configs measured, reused ones included; the failures below are among them
  int reused = 0;   // trials read back from an earlier job's records (TuneRequest::resume)
  // Heuristic rules' configs queued after the other seeds (tuner/seeds.h, step 3): measured
  // before the strategy's own picks as far as the budget goes; a resumed job counts those the
  // job it resumes measured too.
  int rule_seeds_queued = 0;
  int retaken = 0;  // measurements discarded because foreign work disturbed them, and taken again
  int compile_errors = 0, resource_errors = 0, wrong_results = 0, crashes = 0, timeouts = 0;
  int cache_hits = 0;
  double compile_s = 0;  // summed NVRTC time (on the pool, overlapped)
  double measure_s = 0;  // time waiting on the worker
  double wall_s = 0;
  int respawns = 0;  // workers replaced during this job
};

struct TuneResult {
  WinnerRecord winner;
  // The worker still holds it (retime it against a baseline), unless the GPU was refused
  // before the finalists (TuneControl::finish_on_cancel).
  std::uint64_t winner_trial_id = 0;
  TuneStats stats;
  std::vector<TrialRecord> trials;  // measured by this run, in order (reused ones are not here)
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
  // Runs the whole job. `progress` is called after every trial (and once after reused trials are
  // read back). ErrorCode::cancelled when TuneControl stopped it; ErrorCode::not_found when no
  // config passed verification.
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
