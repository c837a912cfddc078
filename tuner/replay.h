// Replay: strategies driven by recorded measurements instead of a GPU.
//
// A ReplayProblem holds every config of one problem as measured by an exhaustive sweep (the
// `ktune-bench --record` format, committed under bench/data/). replay() runs a strategy against
// it as a tuning job would (seeds first, proposals in batches, a trial budget) and returns the
// curve: after each trial, the best time found relative to the sweep's best. This is how the
// strategies are tested in CI on real H200 data.
#pragma once

#include <string>
#include <vector>

#include "templates/registry.h"
#include "tuner/strategy/strategy.h"

namespace ktune {

struct ReplayProblem {
  Problem problem;
  CandidateSet candidates;
  std::vector<double> value;  // per candidate: median_us, or +inf when it failed
  double best = 0;            // the sweep's best time
  std::vector<size_t> seeds;  // the template's heuristic config, when it was measured
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
};

// Runs `strategy` for up to `max_trials`, proposing `batch` at a time.
Result<ReplayCurve> replay(const ReplayProblem& problem, std::string_view strategy,
                           size_t max_trials, std::uint64_t seed, size_t batch = 16);

}  // namespace ktune
