// Replay: strategies driven by recorded measurements instead of a GPU.
//
// A ReplayProblem holds every config of one problem as measured by an exhaustive sweep (the
// `ktune-bench --record` format, committed under bench/data/). replay() runs a strategy against
// it as a tuning job would (seeds first, proposals in batches, a trial budget) and returns the
// curve: after each trial, the best time found relative to the sweep's best. This is how the
// strategies, and seeding a job with the winners of a neighbouring shape, are tested in CI on
// real H200 data. Thread-compatible values and free functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "templates/registry.h"
#include "tuner/seeds.h"
#include "tuner/strategy/strategy.h"

namespace ktune {

struct ReplayProblem {
  Problem problem;
  CandidateSet candidates;
  std::vector<double> value;  // per candidate: median_us, or +inf when it failed
  double best = 0;            // the sweep's best time
  // The templates' heuristic and rule configs that the sweep measured, seeded as a tuning job
  // seeds them (tuner/seeds.h) with ReplayOptions::seeds as the requested ones.
  TemplateSeeds seeds;
};

// Loads every problem of a recorded sweep. Param domains come from the named templates in
// `templates` when they are loaded there, else from the values the sweep contains.
Result<std::vector<ReplayProblem>> load_replay(const std::string& path,
                                               const TemplateRegistry& templates);

struct ReplayCurve {
  std::string strategy;
  std::vector<double>
      fraction;  // fraction[i]: sweep best / best found after i+1 trials (0 until a success)
  double at(size_t trials) const {
    return trials == 0 || fraction.empty() ? 0 : fraction[std::min(trials, fraction.size()) - 1];
  }
  // Trials needed to reach `target` of the sweep's best; one past the run when it never did.
  size_t trials_to(double target) const {
    size_t k = 0;
    while (k < fraction.size() && fraction[k] < target) ++k;
    return k + 1;
  }
};

struct ReplayOptions {
  size_t max_trials = 0;       // 0: the whole space
  std::uint64_t rng_seed = 1;  // the strategy's
  size_t batch = 16;           // proposals per round, as a job's compile window
  // Proposed after the heuristic seed, as TuneRequest::seeds (e.g. the winners of a neighbouring
  // shape), matched across templates; params that are not candidates here are skipped.
  std::vector<Params> seeds = {};
  RuleSeeds rule_seeds = RuleSeeds::included;  // left_out: to compare without the rules' configs
};

// Runs `strategy` as a tuning job would: seeds first, proposals in batches, up to max_trials.
Result<ReplayCurve> replay(const ReplayProblem& problem, std::string_view strategy,
                           const ReplayOptions& options);

// The params of the k fastest configs the sweep measured, fastest first.
std::vector<Params> fastest_configs(const ReplayProblem& problem, size_t k);

}  // namespace ktune
