// Seeds: the configs a tuning job measures before its strategy's own picks, in this order
// (docs/tuning.md, Seeds):
//   1. each template's heuristic config;
//   2. the configs the request names and the winners of neighbouring shapes (TuneRequest::seeds),
//      matched across templates;
//   3. the configs of every template's heuristic rules that fit the problem, whatever their
//      `when` (rule_configs, templates/space.h): tiles a template's author measured best
//      somewhere. One template's after another's in turn, at most trials / k_rule_seed_divisor.
// TuningJob and replay() both order their seeds here, so that strategies are tested on recorded
// data as jobs run them. Free functions over values.
#pragma once

#include <cstddef>
#include <vector>

#include "tuner/strategy/strategy.h"

namespace ktune {

// What the templates of a job contribute, as candidate indices.
struct TemplateSeeds {
  std::vector<size_t> heuristic;           // each template's heuristic config, when a candidate
  std::vector<std::vector<size_t>> rules;  // per template: its rules' configs that are candidates
};

// Adds template `tmpl`'s heuristic and rule configs to `seeds` (those not among `candidates`,
// e.g. blocklisted ones, are left out).
void add_template_seeds(TemplateSeeds& seeds, const CandidateSet& candidates,
                        const KernelTemplate& tmpl, const Problem& problem,
                        const DeviceLimits& limits);

struct SeedOrder {
  std::vector<size_t> seeds;  // for make_strategy, without repeats
  size_t rule_configs = 0;    // how many of them come from step 3
};

// The rules' configs take at most a job's trials / k_rule_seed_divisor.
inline constexpr size_t k_rule_seed_divisor = 4;

// A job's trial budget: `max_trials` where it is set (> 0) and below the candidates' count, else
// every candidate. TuningJob and replay() both cap their trials here.
size_t trial_budget(size_t max_trials, size_t candidates);

// Whether step 3 runs: replay compares with and without it.
enum class RuleSeeds { included, left_out };

// Seeds in the order above. `trials`: the job's trial_budget() (reused trials count against it,
// so a resumed job's cap is that of the job it resumes).
SeedOrder order_seeds(const TemplateSeeds& templates, const CandidateSet& candidates,
                      const std::vector<Params>& requested, size_t trials,
                      RuleSeeds rule_seeds = RuleSeeds::included);

}  // namespace ktune
